"""``Combine.activity`` by hand: the share of rows whose GRPO advantage differs from GRPO's advantage of the
weighted sum (a combine that returns advantages: its output itself), up to one positive factor
(rlpost/combine/base.py); and the single-column warning of ``rlpost show``."""

from __future__ import annotations

import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.combine.base import Combine
from rlpost.combine.normalize_then_sum import NormalizeThenSum
from rlpost.combine.weighted_sum import WeightedSum

COL1 = [1.0, 0, 0, 0, 1, 1, 0, 0]  # G = 4
COL2 = [1.0, 0, 0, 0, 0, 0, 1, 1]  # group 1 as COL1, group 2 the other way round


class Column(Combine):
    """Returns one reward column (the test's stand-in for a combine that re-weights)."""

    def __init__(self, cfg, column: int = 1, produces: str = "rewards"):
        super().__init__(cfg)
        self.column = column
        self.produces = produces  # type: ignore[misc]

    def __call__(self, reward_terms, weights, num_generations):
        return reward_terms[:, self.column], {}


def terms():
    return torch.tensor([COL1, COL2]).T  # [8, 2]


def test_weighted_sum_is_the_no_op_and_reports_nothing():
    w = torch.tensor([1.0, 0.0])
    rewards, _ = WeightedSum(WeightedSum.Config())(terms(), w, 4)
    assert WeightedSum(WeightedSum.Config()).activity(terms(), w, 4, rewards) is None


def test_rewards_are_compared_through_grpo_of_the_weighted_sum():
    w = torch.tensor([1.0, 0.0])  # the plain path trains on COL1
    combine = Column(Column.Config())
    # GRPO(COL2) equals GRPO(COL1) on group 1 and is its negative on group 2: ratios [1] x 4 and [-1] x 4, lower
    # median -1 <= 0 so no factor; group 2's four rows differ: 4 / 8
    assert combine.activity(terms(), w, 4, terms()[:, 1]) == 0.5
    # 3 * COL1 + 7: GRPO removes the shift and (up to its eps, a 1e-4 relative change) the scale: 0
    assert combine.activity(terms(), w, 4, 3 * terms()[:, 0] + 7) == 0.0


def test_advantages_are_compared_as_they_are():
    w = torch.tensor([1.0, 0.0])
    combine = Column(Column.Config(), produces="advantages")
    # the raw column as an "advantage" [1, 0, 0, 0, 1, 1, 0, 0] against GRPO(COL1) [1.5, -.5, -.5, -.5, .87, .87,
    # -.87, -.87]: ratios 0.667 (row 0), 1.155 (rows 4, 5); the zero rows differ from their non-zero no-op: 8 / 8
    assert combine.activity(terms(), w, 4, terms()[:, 0]) == 1.0
    # normalize_then_sum of one column: GRPO per group, then one batch std: GRPO up to a factor, 0
    one = terms()[:, :1]
    advantages, _ = NormalizeThenSum(NormalizeThenSum.Config())(one, torch.ones(1), 4)
    assert NormalizeThenSum(NormalizeThenSum.Config()).activity(one, torch.ones(1), 4, advantages) == 0.0


def test_show_warns_for_a_combine_of_several_columns_with_one_reward_column():
    warnings = build_run(compose(["reward/combine=focal"])).config_warnings()
    assert any("reward/combine=focal acts between several reward columns" in w for w in warnings)
    assert not build_run(compose(["reward/combine=focal", "reward=math_answer_format"])).config_warnings()
