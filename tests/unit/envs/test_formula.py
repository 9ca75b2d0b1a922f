"""data/env=formula (QuantEvolver, seed 004 #20): the factor language and its refusals, IC and factor
correlation by hand, the Diversity-Complementarity reward and the factor database, the compact memory,
checkpoint state, held-out restore, the generated tasks, and the recipe on the tiny model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rlpost.components  # noqa: F401  (registers)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.data.formula_panel import (
    COLUMNS,
    FactorError,
    Panel,
    daily_corr,
    evaluate_factor,
    factor_ic,
    formula_task_rows,
    make_panel,
)
from rlpost.envs.base import build_env
from rlpost.runs.state import STATE_FILE, state_restored

from support.runs import one_step

# 2 days x 3 stocks
HAND = Panel(
    features={
        "mom5": np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]),
        "mom20": np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]),
        "vol20": np.ones((2, 3)),
        "volume": np.array([[-1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]),
        "value": np.array([[3.0, 1.0, 2.0], [1.0, 3.0, 2.0]]),
        "size": np.array([[1.0, 0.0, 2.0], [2.0, 2.0, 0.0]]),
    },
    target=np.array([[2.0, 4.0, 6.0], [1.0, 2.0, 3.0]]),
)
BOTH = slice(0, 2)


def test_factor_language_by_hand():
    assert evaluate_factor("rank(value)", HAND, BOTH).tolist() == [[1.0, 1 / 3, 2 / 3], [1 / 3, 1.0, 2 / 3]]
    # x / 0 = 0: size has zeros
    assert evaluate_factor("mom5 / size", HAND, BOTH).tolist() == [[1.0, 0.0, 1.5], [1.5, 1.0, 0.0]]
    assert evaluate_factor("-mom5 + 2 * mom20", HAND, BOTH).tolist() == [[-1.0, -2.0, -1.0], [-1.0, -2.0, -1.0]]
    assert evaluate_factor("log(volume)", HAND, slice(0, 1)).tolist() == [[-math.log(2), 0.0, math.log(2)]]
    assert evaluate_factor("sign(mom5 - 2)", HAND, slice(1, 2)).tolist() == [[1.0, 0.0, -1.0]]
    # zscore of [1, 2, 3]: mean 2, population std sqrt(2/3)
    assert np.allclose(evaluate_factor("zscore(mom5)", HAND, slice(0, 1)), [[-1.2247449, 0.0, 1.2247449]])
    assert evaluate_factor("3", HAND, BOTH).shape == (2, 3)  # a constant spans the panel (and has IC 0)


@pytest.mark.parametrize(
    ("expression", "match"),
    [
        ("price", "unknown column 'price'"),
        ("__import__('os')", "only rank, zscore, abs, sign, log of one argument may be called"),
        ("max(value)", "only rank, zscore, abs, sign, log of one argument may be called"),
        ("rank(value, 2)", "only rank, zscore, abs, sign, log of one argument may be called"),
        ("value.real", "Attribute is not part of the factor language"),
        ("value ** 2", "Pow is not part of the factor language"),
        ("'a'", "Constant is not part of the factor language"),
        ("rank", "rank is a function: call it"),
        ("mom5 +", "not a factor expression"),
        ("+".join(["value"] * 60), "longer than 200 characters"),
        ("+".join(["mom5"] * 30), "more than 40 parts"),
    ],
)
def test_expressions_outside_the_language_are_refused(expression, match):
    with pytest.raises(FactorError, match=match):
        evaluate_factor(expression, HAND, BOTH)


def test_ic_and_factor_correlation_by_hand():
    # day 0: mom5 [1 2 3] vs target [2 4 6]: corr 1; day 1: [3 2 1] vs [1 2 3]: corr -1 -> IC (1 - 1) / 2 = 0
    assert factor_ic(HAND.features["mom5"], HAND, BOTH) == pytest.approx(0.0)
    # day 1: -mom20 = [-1, 0, 0] vs target [1, 2, 3]: z-scores [-2, 1, 1] / sqrt(2) and [-1, 0, 1] sqrt(1.5);
    # the mean of their products is (2 + 1) sqrt(1.5) / sqrt(2) / 3 = sqrt(0.75) = 0.866
    z_a = np.array([-2.0, 1.0, 1.0]) / math.sqrt(2.0)
    z_b = np.array([-1.0, 0.0, 1.0]) * math.sqrt(1.5)
    assert factor_ic(-HAND.features["mom20"][1:], HAND, slice(1, 2)) == pytest.approx(float((z_a * z_b).mean()))
    assert factor_ic(-HAND.features["mom20"][1:], HAND, slice(1, 2)) == pytest.approx(math.sqrt(0.75))
    assert daily_corr(HAND.features["mom5"], 2 * HAND.features["mom5"] + 1) == pytest.approx(1.0)
    assert daily_corr(HAND.features["vol20"], HAND.features["mom5"]) == 0.0  # no spread: 0


def env(**params):
    return build_env({"name": "formula", **params})


def task(start=30, window=60):
    return {"prompt": [{"role": "user", "content": "Find a factor."}], "start": start, "window": window}


def test_the_reward_is_ic_minus_redundancy_and_good_distinct_factors_join_the_database():
    e = env(diversity_weight=0.5, min_ic=-1.0, max_corr=0.9)
    e.reset(task())
    panel, days = make_panel(), slice(30, 90)
    first = e.step("Here: <factor>-mom5</factor>")
    ic = factor_ic(evaluate_factor("-mom5", panel, days), panel, days)
    assert first.done and first.reward == pytest.approx(ic)  # an empty database: no redundancy
    assert first.info["admitted"] and e.library == [("-mom5", pytest.approx(ic))]
    # the same factor scaled: corr 1 with the database -> r = IC - 0.5 x 1, and not admitted (corr > 0.9)
    again = e.step("<factor>2 * (-mom5)</factor>")
    assert again.reward == pytest.approx(ic - 0.5) and again.info["max_corr"] == pytest.approx(1.0)
    assert not again.info["admitted"] and len(e.library) == 1
    other = e.step("<factor>value</factor>")
    corr = abs(daily_corr(evaluate_factor("value", panel, days), evaluate_factor("-mom5", panel, days)))
    value_ic = factor_ic(evaluate_factor("value", panel, days), panel, days)
    assert other.reward == pytest.approx(value_ic - 0.5 * corr) and other.info["tool_calls"] == 1
    assert math.isfinite(other.info["oos_ic"])


def test_invalid_or_missing_factors_and_the_admission_rules():
    e = env()
    e.reset(task())
    missing = e.step("I think momentum works.")
    assert missing.reward == -0.05 and missing.info == {"tool_calls": 0, "tool_errors": 1}
    invalid = e.step("<factor>price * 2</factor>")
    assert invalid.reward == -0.05 and invalid.info == {"tool_calls": 1, "tool_errors": 1}
    small = env(library_size=2, min_ic=0.0)
    assert not small.admit("a", -0.01, 0.0)  # IC below min_ic
    assert not small.admit("b", 0.05, 0.8)  # too close to the database (max_corr 0.7)
    assert small.admit("c", 0.02, 0.0) and small.admit("d", 0.06, 0.1) and not small.admit("d", 0.06, 0.1)
    assert small.admit("e", 0.04, 0.2)  # the database keeps the 2 best: d, e
    assert small.library == [("d", 0.06), ("e", 0.04)] and not small.admit("f", 0.01, 0.0)


def test_compact_memory_shared_database_and_checkpoint_state():
    e = env(memory_size=2)
    assert e.reset(task()) == task()["prompt"]  # an empty database: no memory
    e.library += [("value", 0.05), ("-mom5", 0.04), ("size", 0.03)]
    child = e.fresh()
    assert child.library is e.library  # every episode of the run shares one database
    text = child.reset(task())[-1]["content"]
    assert text.endswith("1. value (IC +0.050)\n2. -mom5 (IC +0.040)") and "size" not in text
    assert "Best factors found so far" in text
    assert env(memory_size=0).reset(task()) == task()["prompt"]
    state = e.state_dict()
    restored = env()
    restored.load_state_dict(state)
    assert restored.library == e.library and restored.stateful
    with state_restored(e):  # held-out evaluation leaves the database as it was
        e.admit("volume", 0.2, 0.0)
        assert e.library[0] == ("volume", 0.2)
    assert e.library == restored.library


def test_generated_tasks_name_their_seed_factor_and_its_ic():
    rows = formula_task_rows(seed=3, size=5, window=40)
    assert rows == formula_task_rows(seed=3, size=5, window=40) and rows != formula_task_rows(seed=4, size=5, window=40)
    panel = make_panel()
    for row in rows:
        days = slice(row["start"], row["start"] + 40)
        assert row["seed_ic"] == pytest.approx(
            factor_ic(evaluate_factor(row["answer"], panel, days), panel, days), abs=1e-6
        )
        assert f"Seed factor: {row['answer']} (IC {row['seed_ic']:+.3f}" in row["question"]
        assert 21 <= row["start"] and row["start"] + 40 < panel.days
    with pytest.raises(ValueError, match="window=400 must be in 5..278"):
        formula_task_rows(0, 1, window=400)
    assert set(COLUMNS) <= set(panel.features) and panel.target.shape == (300, 40)


def test_the_panel_carries_the_alpha_it_was_built_with():
    panel, days = make_panel(), slice(21, 299)
    ic = {f: factor_ic(evaluate_factor(f, panel, days), panel, days) for f in ("-mom5", "value", "size", "volume")}
    assert ic["-mom5"] > 0.05 and ic["value"] > 0.04  # reversal and value are planted (0.004, 0.003 per z)
    assert abs(ic["size"]) < 0.03 and abs(ic["volume"]) < 0.03  # size and volume alone carry none


def test_panel_mismatch_between_tasks_and_environment_is_refused():
    with pytest.raises(ConfigError, match=r"data.task_params.days=200 but data.env.days=300"):
        build_run(compose(["model=tiny-random", "recipe=quantevolver", "data.task_params.days=200"]))


def test_recipe_trains_and_checkpoints_the_database(tmp_path):
    rows = one_step("quantevolver", tmp_path, "train.steps=2", "train.max_completion_length=16", "train.save_steps=2")
    metrics = {k: v for row in rows for k, v in row.items()}
    assert math.isfinite(metrics["rewards/env/mean"]) and "env/tool_errors" in metrics
    state = torch.load(tmp_path / "quantevolver" / "checkpoints" / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert set(state["data.env"]) == {"expressions", "ics"}
