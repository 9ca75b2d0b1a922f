"""Offline benchmarks (rlpost/data/benchmarks.py) read from their wheels, and the ifeval reward on real IFEval rows,
worked out by hand: prompt- and instruction-level, strict and loose, the instruction-weighted mean."""

from __future__ import annotations

import json
import re

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.data.benchmarks import WHEELS, benchmark_rows
from rlpost.evaluation.evaluate import _term_mean
from rlpost.scoring.columns import expand_columns
from rlpost.scoring.terms import build_reward_terms

from support.paths import REPO


def test_each_benchmark_has_its_rows_and_format():
    sizes = {name: len(benchmark_rows(name)) for name in ("ifeval", "gsm8k", "mmlu", "aime")}
    assert sizes == {"ifeval": 541, "gsm8k": 1319, "mmlu": 1000, "aime": 15}
    ifeval = benchmark_rows("ifeval")
    assert sum(r["num_instructions"] for r in ifeval) == 834  # IFEval's instruction count
    assert ifeval[1]["instruction_id_list"] == '["punctuation:no_comma"]' and ifeval[0]["key"] == 1000
    gsm8k = benchmark_rows("gsm8k")
    assert gsm8k[0]["answer"] == "18" and gsm8k[146]["answer"] == "2125"  # "2,125" in the file: commas dropped
    mmlu = benchmark_rows("mmlu")
    assert {r["answer"] for r in mmlu} == set("ABCD") and all(re.search(r"^A\. ", r["question"], re.M) for r in mmlu)
    assert not any(r["question"].endswith("Answer:") for r in mmlu)
    assert benchmark_rows("aime")[0]["answer"] == "630"


def test_the_makefile_downloads_the_wheels_the_code_reads():
    line = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("BENCHMARK_WHEELS"))
    assert set(line.split("=", 1)[1].split()) == {f"{name}=={version}" for name, version in WHEELS.items()}


def ifeval_columns():
    funcs, names, weights = build_reward_terms([{"name": "ifeval"}])
    return expand_columns(funcs, names, weights)[:2]


def score(rows: list[dict], responses: list[str]) -> dict[str, list[float]]:
    funcs, names = ifeval_columns()
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    return {n: f([r["question"] for r in rows], responses, **columns) for f, n in zip(funcs, names)}


def test_ifeval_strict_and_loose_on_real_rows():
    row = benchmark_rows("ifeval")[1]  # one instruction: punctuation:no_comma
    got = score([row] * 3, ["Day one visit Tokyo.", "Day one, visit Tokyo.", "Sure, here it is:\nDay one visit Tokyo."])
    # no comma: followed; a comma: not; a comma only in a first line that loose mode drops: strict 0, loose 1
    assert got["ifeval/prompt_strict"] == [1.0, 0.0, 0.0]
    assert got["ifeval/prompt_loose"] == [1.0, 0.0, 1.0]
    assert got["ifeval/instruction_strict"] == [1.0, 0.0, 0.0]


def test_ifeval_instruction_level_counts_instructions_not_prompts():
    rows = benchmark_rows("ifeval")
    three = rows[0]  # no_comma, 3 highlighted sections, at least 300 words
    assert json.loads(three["instruction_id_list"])[0] == "punctuation:no_comma"
    got = score([rows[1], three], ["Day one visit Tokyo.", "A short summary without commas."])
    # row 1: 1 of 1 followed; row 0: only no_comma of 3 -> 1/3 each, prompt-level 1 and 0
    assert got["ifeval/instruction_strict"] == pytest.approx([1.0, 1 / 3])
    assert got["ifeval/prompt_strict"] == [1.0, 0.0]
    # held-out mean weighted by the instruction count: (1 + 1) / (1 + 3) = 0.5, not (1 + 1/3) / 2
    funcs, _ = ifeval_columns()
    assert funcs[2].mean_weights == "num_instructions" and funcs[0].mean_weights is None
    assert _term_mean(torch.tensor([1.0, 1 / 3]), [1, 3]) == pytest.approx(0.5)
    assert _term_mean(torch.tensor([1.0, float("nan"), 0.0]), [1, 5, 3]) == pytest.approx(0.25)  # NaN row skipped


def test_a_benchmark_is_never_training_data():
    with pytest.raises(ConfigError, match="data=ifeval is a test set.*eval.sets=\\[ifeval\\]"):
        build_run(compose(["data=ifeval"]))
    run = build_run(compose(["eval.sets=[ifeval,gsm8k,mmlu,aime]"]))
    names = {s.cfg.name: s.correct.name for s in run.eval_sets}
    assert names == {"ifeval": "ifeval/prompt_strict", "gsm8k": "math_answer", "mmlu": "choice_or_text",
                     "aime": "math_answer"}  # fmt: skip


def test_rlpost_eval_scores_ifeval_offline(tmp_path):
    from rlpost import cli

    out = tmp_path / "eval.json"
    argv = ["eval", "model=tiny-random", "data=ifeval", "reward=ifeval", "size=3", "max_new_tokens=4"]
    assert cli.main([*argv, "progress=false", f"out={out}", f"hydra.run.dir={tmp_path / 'h'}"]) == 0
    results = json.loads(out.read_text())["results"]
    assert results["eval/num_prompts"] == 3
    assert results["eval/accuracy"] == results["eval/ifeval/prompt_strict"]  # the criterion: prompt-level strict
    assert 0.0 <= results["eval/ifeval/instruction_strict"] <= results["eval/ifeval/instruction_loose"] <= 1.0
