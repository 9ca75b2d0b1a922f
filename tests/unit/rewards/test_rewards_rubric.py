"""reward=rubric: weighted means of judge scores (hand-computed), rubric forms (rlpost, WritingBench,
per-item column), judge failures, config errors; and the end-to-end `rlpost train algorithm=gepo
reward=rubric` with the local SmolLM2 judge."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import yaml

import rlpost.components  # noqa: F401
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.rubric import parse_rubric

from support.judges import requests_for

# keyword endpoint: Yes iff the criterion's last word occurs in the response; "unclear" -> malformed
RUBRIC = {
    "criteria": [
        {"name": "polite", "text": "The response says please", "weight": 1.0},
        {"name": "number", "text": "The response contains 42", "weight": 3.0},
    ]
}


def make(server_url, tmp_path, **params):
    judge = {"backend": "openai", "base_url": f"{server_url}/keyword/v1", "cache": False, "retries": 0}
    judge.update(params.pop("judge", {}))
    cls = REWARDS.get("rubric")
    return cls(build_config(cls.Config, {"judge": judge, **params}, "test"))


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return str(path)


def test_weighted_mean_of_criteria(server, tmp_path):  # noqa: F811
    reward = make(server, tmp_path, rubric=write(tmp_path, "r.yaml", RUBRIC), reference_column=None)
    completions = ["please, 42", "42", "please", "nothing", "<think>please 42</think>no"]
    # (w_polite * s_polite + w_number * s_number) / (1 + 3):
    #   both -> (1 + 3) / 4 = 1.0;  42 only -> 3/4 = 0.75;  please only -> 1/4 = 0.25;  none -> 0.0;
    #   the trace is stripped, the answer "no" meets neither -> 0.0
    assert reward(["q"] * 5, completions) == [1.0, 0.75, 0.25, 0.0, 0.0]
    assert len(requests_for("keyword")) == 10  # one judge prompt per (completion, criterion)


def test_json_rubric_and_reference_in_prompt(server, tmp_path):  # noqa: F811
    reward = make(server, tmp_path, rubric=write(tmp_path, "r.json", RUBRIC))
    prompt = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Calculate 6 * 7."}]
    assert reward([prompt], ["please"], answer=["42"]) == [0.25]
    sent = requests_for("keyword")[0]["prompt"]
    assert "Task: Calculate 6 * 7." in sent and "Reference answer (known to be correct): 42" in sent
    assert sent.endswith("Does the response meet the criterion? Answer with Yes or No only.")


def test_failed_criterion_is_left_out(server, tmp_path):  # noqa: F811
    rubric = {"criteria": [*RUBRIC["criteria"], {"name": "vague", "text": "The response is unclear", "weight": 2.0}]}
    reward = make(server, tmp_path, rubric=write(tmp_path, "r.yaml", rubric), reference_column=None)
    logged = {}
    # "vague" is malformed (skip): mean over polite and number only -> 42 only: 3/4; nothing: 0/4
    assert reward(["q", "q"], ["42", "x"], log_metric=lambda k, v: logged.__setitem__(k, v)) == [0.75, 0.0]
    assert logged["rubric/judge_calls"] == 6.0 and logged["rubric/judge_failures"] == 2.0
    assert logged["rubric/number"] == 0.5  # the batch mean of the "number" criterion: (1 + 0) / 2
    only_vague = make(
        server, tmp_path, rubric=write(tmp_path, "v.yaml", [rubric["criteria"][2]]), reference_column=None
    )
    assert only_vague(["q"], ["42"]) == [None]  # nothing judged: the sample does not count
    zero = make(
        server, tmp_path, rubric=write(tmp_path, "r.yaml", rubric), reference_column=None, judge={"on_failure": "zero"}
    )
    # zero: vague scores 0 with weight 2 -> 42 only: 3 / (1 + 3 + 2) = 0.5
    assert zero(["q"], ["42"]) == [0.5]


def test_writingbench_checklist_and_per_item_rubrics(server, tmp_path):  # noqa: F811
    # WritingBench stores checklists as Python literals (single quotes); each criterion weighs 1
    checklist = str(
        [
            {"name": "Tone", "criteria_description": "It says please", "1-2": "rude", "9-10": "very polite"},
            {"name": "Facts", "criteria_description": "It mentions Paris", "1-2": "wrong", "9-10": "right"},
        ]
    )
    criteria = parse_rubric(checklist)
    assert [(c.name, c.text, c.weight) for c in criteria] == [
        ("Tone", "Tone: It says please", 1.0),
        ("Facts", "Facts: It mentions Paris", 1.0),
    ]
    assert criteria[0].bands == (("1-2", "rude"), ("9-10", "very polite"))
    file_rubric = write(tmp_path, "r.yaml", RUBRIC)
    reward = make(server, tmp_path, rubric=None, rubric_column="rubric", reference_column=None)
    # row 1: the checklist, "please, Paris" meets both -> 1.0; row 2: a rubric file, "42" -> 3/4
    assert reward(["q", "q"], ["please, Paris", "42"], rubric=[checklist, file_rubric]) == [1.0, 0.75]


def test_answer_tag_judges_only_the_last_answer_block(server, tmp_path):  # noqa: F811
    reward = make(
        server, tmp_path, rubric=write(tmp_path, "r.yaml", RUBRIC), reference_column=None, answer_tag="answer"
    )
    completions = [
        "<intent>x</intent><think>y</think><answer>please, 42</answer>",  # both criteria -> (1 + 3) / 4 = 1.0
        "<intent>please 42</intent><think>t</think><answer>nothing</answer>",  # the judge sees "nothing" -> 0.0
        "please 42",  # no <answer> block: every criterion 0, no judge call -> 0.0
        "<answer>42</answer> then <answer>please</answer>",  # the last block, "please" -> 1/4
    ]
    logged = {}
    assert reward(["q"] * 4, completions, log_metric=logged.__setitem__) == [1.0, 0.0, 0.0, 0.25]
    assert len(requests_for("keyword")) == 6  # 3 answered completions x 2 criteria
    assert logged["rubric/polite"] == 0.5  # (1 + 0 + 0 + 1) / 4: the unanswered one counts as 0
    with pytest.raises(Exception, match="answer_tag.*'a b' is not a plain tag name"):
        make(server, tmp_path, answer_tag="a b")


def test_scale_mode_shows_score_bands(server, tmp_path):  # noqa: F811
    checklist = [{"name": "Tone", "criteria_description": "It is polite", "1-2": "rude", "9-10": "polite"}]
    cls = REWARDS.get("rubric")
    judge = {"backend": "openai", "base_url": f"{server}/scale/v1", "cache": False, "mode": "scale"}
    reward = cls(
        build_config(
            cls.Config, {"rubric": write(tmp_path, "c.json", checklist), "judge": judge, "reference_column": None}, "t"
        )
    )
    assert reward(["q"], ["hello"]) == [pytest.approx(6 / 9)]  # the endpoint answers 7: (7 - 1) / 9
    sent = requests_for("scale")[0]["prompt"]
    assert "score 1-2: rude" in sent and "from 1 (worst) to 10 (best)" in sent


def test_default_rubric_builds_with_the_defaults():
    run = build_run(compose(["algorithm=gepo", "reward=rubric"]))
    rubric = run.reward.funcs[0]
    assert [(c.name, c.weight) for c in rubric.default] == [("final_number", 1.0), ("correct", 2.0)]
    assert rubric.judge.name == "local" and rubric.judge.cfg.model.source == "smollm2"
    assert rubric.judge._model is None  # nothing loads while building


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "reward.terms.0.params.rubric=nope.yaml",
            r"reward.terms\[0\].params.rubric: rubric: no such rubric file 'nope.yaml'",
        ),
        (
            "reward.terms.0.params.judge.backend=remote",
            r"reward.terms\[0\].params.judge: backend: Unknown judge 'remote'",
        ),
        (
            "reward.terms.0.params.judge.mode=score",
            r"reward.terms\[0\].params.judge: Invalid value mode='score'. Valid choices: yes_no, scale",
        ),
        ("+reward.terms.0.params.template=no_fields", r"reward.terms\[0\].params.template: must contain \{question\}"),
    ],
)
def test_config_errors_before_any_model_loads(override, message):
    with pytest.raises(ConfigError, match=message):
        build_run(compose(["reward=rubric", override]))


@pytest.mark.slow
def test_train_gepo_rubric_smollm2_local_judge(tmp_path):
    """`rlpost train algorithm=gepo reward=rubric` with its defaults (SmolLM2 policy, local SmolLM2
    judge), shortened to 2 steps of 4 completions of 16 tokens: metrics are finite."""
    run_dir = tmp_path / "run"
    args = [
        "train",
        "algorithm=gepo",
        "reward=rubric",
        "train.steps=2",
        "train.num_generations=4",
        "train.completions_per_step=4",
        "train.max_completion_length=16",
        "eval.at_start=false",
        "eval.size=4",
        "eval.batch_size=4",
        "logging.progress=false",
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlpost.cli", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        for key in ("loss", "grad_norm", "reward", "rewards/rubric/mean", "rubric/judge_calls", "rubric/correct"):
            assert isinstance(row.get(key), float) and math.isfinite(row[key]), (key, row)
        assert row["rubric/judge_calls"] == 8.0  # 4 completions x 2 criteria
        assert row["rubric/judge_failures"] == 0.0
        assert 0.0 <= row["rewards/rubric/mean"] <= 1.0
