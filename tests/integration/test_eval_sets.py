"""eval.sets and sampled held-out metrics during training: a real 2-step run on the tiny model logs every
set at the start, every step and the end, and the compute axis (train_flops); bad sets are refused
before any model loads."""

from __future__ import annotations

import json
import math

import pytest

from rlpost import cli
from rlpost.models.flops import flops_per_token, model_parameters
from rlpost.runs.callbacks import held_out_summary

from support.runs import TINY_CLI

HASH = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"
ARITH = "{name: arith, data: chain_sum, reward: math_answer, size: 3, samples: 2, pass_k: [1, 2]}"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """2 steps, eval every step: the run's own split (a hashed reward: no correctness criterion) sampled
    twice per prompt, plus an inline chain_sum set scored by math_answer (a criterion)."""
    out = tmp_path_factory.mktemp("sets") / "run"
    tiny = [o for o in TINY_CLI if not o.startswith(("train.steps", "eval.at_start"))]
    argv = ["train", *tiny, HASH, "train.steps=2", "eval.every=1", "eval.samples=2", f"eval.sets=[{ARITH}]"]
    assert cli.main([*argv, f"hydra.run.dir={out}"]) == 0
    return out


def test_every_set_is_logged_at_start_every_step_and_end(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/arith/reward" in r]
    assert [r["step"] for r in evals] == [0, 1, 2]
    for row in evals:
        # the set has a criterion (math_answer): greedy accuracy, sampled avg@2, pass@1/2, maj@1/2
        for key in ("accuracy", "reward", "mean_length", "sampled/avg@2", "sampled/pass@2", "sampled/maj@2"):
            assert math.isfinite(row[f"eval/arith/{key}"]), key
        assert row["eval/arith/num_prompts"] == 3 and row["eval/arith/sampled/samples_per_prompt"] == 2
        assert 0.0 <= row["eval/arith/sampled/pass@1"] <= row["eval/arith/sampled/pass@2"] <= 1.0
        # the run's own split has no criterion: reward and sampled reward spread, never an accuracy
        assert math.isfinite(row["eval/reward"]) and math.isfinite(row["eval/sampled/reward_std"])
        assert not [k for k in row if k.startswith(("eval/accuracy", "eval/sampled/pass", "eval/sampled/maj"))]


def test_the_objective_and_the_best_checkpoint_follow_the_reward_without_a_criterion(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best"]["objective"] == "eval/reward"  # eval.objective=auto, no verifiable term
    assert "eval/arith/accuracy" in summary["before"] and "eval/arith/accuracy" in summary["after"]
    items = json.loads((run_dir / "eval_items.json").read_text())
    assert items and all(set(i) == {"index", "reward", "completion"} for i in items)  # no score or correct


def test_train_flops_is_logged_with_the_tokens_it_counts(run_dir):
    from transformers import AutoModelForCausalLM

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "loss" in r]
    n = model_parameters(AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "final"))
    per_token = flops_per_token(n, 1, False)  # one pass, no reference model
    assert [r["train_flops"] for r in train] == pytest.approx([r["num_tokens"] * per_token for r in train])
    assert 0 < train[0]["train_flops"] < train[1]["train_flops"]  # cumulative


def test_the_progress_bar_shows_each_split_once():
    logs = {"eval/accuracy": 0.41, "eval/reward": 0.41, "eval/gsm/accuracy": 0.125, "eval/gsm/reward": 0.2,
            "eval/judged/reward": 0.5, "eval/sampled/accuracy": 0.3, "eval/accuracy/harmful": 0.9}  # fmt: skip
    # accuracy where a split has one, else its reward; sampled and per-group breakdowns stay off the bar
    assert held_out_summary(logs) == ["eval/accuracy=0.41", "eval/gsm/accuracy=0.125", "eval/judged/reward=0.5"]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ("[gsm]", "eval.sets[0]='gsm' is no eval set"),
        ("[{name: a, data: gsm_symbolc}]", "eval.sets[0].data='gsm_symbolc' is no data option; valid: "),
        ("[{name: a, data: chain_sum, reward: rubrik}]", "eval.sets[0].reward='rubrik' is no reward option"),
        ("[{name: a, data: chain_sum, size: 500}]", "eval.sets[0].size=500 but data=chain_sum holds 100"),
        ("[{name: a, data: chain_sum}, {name: a, data: gsm_symbolic}]", "the set name 'a' is used twice"),
        ("[{name: a, data: chain_sum, sampels: 2}]", "sampels"),
        ("[{name: a, data: chain_sum, pass_k: [0]}]", "eval.sets[0].pass_k"),
    ],
)
def test_bad_sets_fail_before_any_model_loads(sets, message, tmp_path, capsys):
    argv = ["train", "model=tiny-random", f"eval.sets={sets}", f"hydra.run.dir={tmp_path / 'r'}"]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
