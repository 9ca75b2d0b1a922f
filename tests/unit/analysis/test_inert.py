"""rlpost/analysis/inert.py by hand: which logged activity figures stayed 0, and the reason read from the logs."""

from __future__ import annotations

from rlpost.analysis.inert import ALL_EQUAL, NO_FLAT_GROUP, ONE_COLUMN, figures, inert_figures, inert_lines

ROWS = [  # two training steps and an evaluation row (which carries no figure)
    {"step": 1, "frac_reward_zero_std": 1.0, "rlpost/varied_reward_columns": 1.0, "active/combine/focal": 0.0,
     "active/loss/gspo": 0.0, "active/regularizer/entropy": 0.2, "active/keep/dynamic_sampling": 1.0},
    {"step": 2, "frac_reward_zero_std": 1.0, "rlpost/varied_reward_columns": 0.0, "active/combine/focal": 0.0,
     "active/loss/gspo": None, "active/regularizer/entropy": 0.0, "active/keep/dynamic_sampling": 1.0},
    {"step": 2, "eval/reward": 0.5},
]  # fmt: skip


def test_figures_and_the_inert_ones():
    assert figures(ROWS)["active/loss/gspo"] == [0.0]  # a None (no value that step) is left out
    entries = inert_figures(ROWS)
    # focal and gspo stayed 0; entropy moved at step 1; dynamic sampling dropped everything (1.0)
    assert [e["component"] for e in entries] == ["combine/focal", "loss/gspo"]
    assert [e["steps"] for e in entries] == [2, 1]
    assert {e["reason"] for e in entries} == {ALL_EQUAL}  # frac_reward_zero_std = 1 at both steps


def test_reasons():
    mixed = [{**row, "frac_reward_zero_std": 0.5} for row in ROWS[:2]]
    by_name = {e["component"]: e["reason"] for e in inert_figures(mixed)}
    assert by_name == {"combine/focal": ONE_COLUMN, "loss/gspo": None}  # at most one column varied; no reason
    own = inert_figures(mixed, {"active/loss/gspo": "every ratio was 1"})  # a component's own reason comes first
    assert [e["reason"] for e in own] == [ONE_COLUMN, "every ratio was 1"]
    never_flat = [{"frac_reward_zero_std": 0.0, "active/keep/dynamic_sampling": 0.0}]
    assert inert_figures(never_flat)[0]["reason"] == NO_FLAT_GROUP


def test_lines():
    (line,) = inert_lines([{"component": "loss/gspo", "steps": 3, "reason": "every ratio was 1"}])
    assert line == "inert: loss/gspo (0 at all 3 steps): every ratio was 1"
    assert inert_lines([]) == []
