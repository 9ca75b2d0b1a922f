"""reward=rubric with columns=criteria: one reward column per criterion (rlpost/scoring/columns.py), so that
reward/combine=focal re-weights a rubric's criteria (seed 004 #4). Hand-computed columns, weights and focal
rewards, per-row rubrics, config errors, and 2 trainer steps with the keyword judge endpoint."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

import rlpost.components  # noqa: F401
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.combine.base import COMBINERS
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.scoring.columns import expand_columns

from support.judges import requests_for

# keyword endpoint: Yes iff the criterion's last word occurs in the response
RUBRIC = {
    "criteria": [
        {"name": "polite", "text": "The response says please", "weight": 1.0},
        {"name": "number", "text": "The response contains 42", "weight": 3.0},
    ]
}


def rubric(server, tmp_path, **params):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(RUBRIC))
    judge = {"backend": "openai", "base_url": f"{server}/keyword/v1", "cache": False, "retries": 0}
    cls = REWARDS.get("rubric")
    config = {"rubric": str(path), "judge": judge, "reference_column": None, "columns": "criteria", **params}
    return cls(build_config(cls.Config, config, "test"))


def columns_of(reward, weight=1.0):
    funcs, names, weights, owners = expand_columns([reward], ["rubric"], torch.tensor([weight]))
    return funcs, names, weights, owners


def test_criteria_columns_from_one_judge_pass(server, tmp_path):  # noqa: F811
    funcs, names, weights, owners = columns_of(rubric(server, tmp_path), weight=2.0)
    assert names == ["rubric/polite", "rubric/number"] and owners == [0, 0]
    # each column's weight is the term's weight times the criterion's share: 2 * 1/4, 2 * 3/4
    assert weights.tolist() == [0.5, 1.5]
    prompts, completions = ["q"] * 4, ["please, 42", "please", "42", "x"]
    polite, number = (f(prompts, completions) for f in funcs)
    assert polite == [1.0, 1.0, 0.0, 0.0] and number == [1.0, 0.0, 1.0, 0.0]
    assert len(requests_for("keyword")) == 8  # 4 completions x 2 criteria, once: the second column read the table
    funcs[0](list(prompts), completions)  # other lists (a new batch): judged afresh
    assert len(requests_for("keyword")) == 16
    # the columns' weighted sum is the mean column's reward when every criterion was judged: (w . s) / 2
    mean = rubric(server, tmp_path, columns="mean")(prompts, completions)
    summed = [(0.5 * p + 1.5 * n) / 2.0 for p, n in zip(polite, number)]
    assert summed == mean == [1.0, 0.25, 0.75, 0.0]


def test_focal_reweights_the_rubric_criteria_toward_the_unsaturated_one(server, tmp_path):  # noqa: F811
    funcs, _, weights, _ = columns_of(rubric(server, tmp_path))
    prompts, completions = ["q"] * 4, ["please, 42", "please", "please", "x"]
    terms = torch.tensor([f(prompts, completions) for f in funcs]).t()  # [N=4, R=2]: polite, number
    focal = COMBINERS.get("focal")
    combine = focal(build_config(focal.Config, {"gamma": 2.0, "momentum": 0.0, "eps": 0.05}, "t"))
    rewards, metrics = combine(terms, weights, 4)
    # saturation = batch mean on [0, 1]: polite (1+1+1+0)/4 = 0.75, number (1+0+0+0)/4 = 0.25
    # a_j = w_j (1 - s_j + 0.05)^2: polite 0.25 * 0.3^2 = 0.0225, number 0.75 * 0.8^2 = 0.48;
    # renormalized to sum w = 1: polite 0.0225 / 0.5025 = 0.044776, number 0.48 / 0.5025 = 0.955224
    assert metrics["focal/saturation/0"] == pytest.approx(0.75) and metrics["focal/saturation/1"] == pytest.approx(0.25)
    assert metrics["focal/weight/0"] == pytest.approx(0.0225 / 0.5025)
    assert metrics["focal/weight/1"] == pytest.approx(0.48 / 0.5025)
    # r = a . s: both -> 1.0; please only -> 0.044776 (the mean column gives it 0.25); nothing -> 0
    assert rewards.tolist() == pytest.approx([1.0, 0.0225 / 0.5025, 0.0225 / 0.5025, 0.0])


def test_per_row_rubrics_fill_their_declared_columns(server, tmp_path):  # noqa: F811
    other = json.dumps({"criteria": [{"name": "city", "text": "It mentions Paris", "weight": 2.0}]})
    criteria = {"polite": 1.0, "number": 3.0, "city": 2.0}
    reward = rubric(server, tmp_path, rubric=None, rubric_column="rubric", criteria=criteria)
    funcs, names, weights, _ = columns_of(reward)
    assert names == ["rubric/polite", "rubric/number", "rubric/city"]
    assert weights.tolist() == pytest.approx([1 / 6, 3 / 6, 2 / 6])
    rows = {"rubric": [json.dumps(RUBRIC), other]}
    table = [f(["q", "q"], ["please", "Paris"], **rows) for f in funcs]
    # row 0's rubric has polite and number (city: None); row 1's has only city
    assert table == [[1.0, None], [0.0, None], [None, 1.0]]
    wrong_weight = json.dumps({"criteria": [{"name": "city", "text": "It mentions Paris", "weight": 5.0}]})
    with pytest.raises(ValueError, match="row 0 gives criterion 'city' weight 5.0, but its column has weight 2.0"):
        funcs[0](["q"], ["x"], rubric=[wrong_weight])
    unknown = json.dumps([{"name": "tone", "text": "It is kind"}])
    with pytest.raises(ValueError, match=r"row 0's criterion 'tone' is not among the declared columns \(polite"):
        funcs[0](["q"], ["x"], rubric=[unknown])


def test_built_run_has_one_column_per_criterion_and_focal_names_them():
    run = build_run(compose(["reward=rubric", "reward/combine=focal", "reward.terms.0.params.columns=criteria"]))
    assert run.reward.names == ["rubric/final_number", "rubric/correct"]
    assert run.reward.weights.tolist() == pytest.approx([1 / 3, 2 / 3])  # arithmetic.yaml: weights 1 and 2
    assert len(run.reward.failure) == 2 and run.reward.combine.names == run.reward.names
    assert run.reward.funcs[0].table is run.reward.funcs[1].table  # one judge pass per batch
    assert run.reward.funcs[0].table.reward.judge._model is None  # nothing loads while building


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["reward.terms.0.params.rubric_column=rubric"],
            r"reward.terms\[0\].params.criteria: columns=criteria with per-row rubrics \(rubric_column\) needs",
        ),
        (["reward.terms.0.params.criteria={a: 1.0}"], r"params.criteria: is for per-row rubrics"),
        (["reward.terms.0.params.columns=each"], r"columns.*Valid choices: mean, criteria"),
        (
            ["reward/combine=focal", "reward.combine.low=[0.0,0.0,0.0]"],
            r"reward.combine.low has 3 values for 2 reward terms \(rubric/final_number, rubric/correct\)",
        ),
    ],
)
def test_config_errors_before_any_model_loads(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_run(compose(["reward=rubric", "reward.terms.0.params.columns=criteria", *overrides]))


def test_two_steps_focal_over_rubric_criteria(server, tmp_path):  # noqa: F811
    from support.trainer import make_run, step_logs, train_rlpost

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(RUBRIC))
    judge = f"{{backend: openai, base_url: '{server}/keyword/v1', cache: false, retries: 0}}"
    terms = (
        f"reward.terms=[{{name: rubric, weight: 1.0, params: {{rubric: '{path}', reference_column: null, "
        f"columns: criteria, judge: {judge}}}}}]"
    )
    run = make_run(["train.steps=2", "train.num_generations=4", "reward/combine=focal", terms])
    logs = step_logs(train_rlpost(run, tmp_path / "run"))
    assert len(logs) == 2
    for log in logs:
        for name in ("polite", "number"):
            assert 0.0 <= log[f"rewards/rubric/{name}/mean"] <= 1.0  # TRL logs each column
            assert 0.0 <= log[f"rlpost/focal/saturation/rubric/{name}"] <= 1.0
        weights = [log["rlpost/focal/weight/rubric/polite"], log["rlpost/focal/weight/rubric/number"]]
        assert sum(weights) == pytest.approx(1.0, abs=1e-4)  # renormalized to the configured total
    assert len(requests_for("keyword")) == 2 * 8 * 2  # 2 steps x 8 completions x 2 criteria: one pass each
