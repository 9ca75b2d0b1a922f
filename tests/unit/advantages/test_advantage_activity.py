"""``Advantage.activity`` by hand: the share of rows (or counted tokens) whose advantage differs from GRPO's
group-normalised advantage of the same rewards, up to one positive factor (rlpost/advantages/base.py)."""

from __future__ import annotations

import math

import torch

from rlpost.advantages.base import Advantage, GroupBatch, grpo_advantages
from rlpost.advantages.group_norm import GroupNorm

from support.advantages import batch

REWARDS = [1, 0, 0, 0, 1, 1, 0, 0]  # G = 4: group 1 has one success, group 2 two
# GRPO: group 1 mean .25, unbiased std sqrt((.75^2 + 3 * .25^2) / 3) = 0.5 -> [.75, -.25, -.25, -.25] / 0.5001
# group 2 mean .5, std sqrt(4 * .25 / 3) = 0.57735 -> [.5, .5, -.5, -.5] / 0.57745
A1, A2 = 0.75 / 0.5001, 0.5 / (math.sqrt(1 / 3) + 1e-4)


class Given(Advantage):
    """An estimator that returns what the test hands it (the figure reads only the output)."""

    def __call__(self, b: GroupBatch):
        raise NotImplementedError


def test_the_no_op_is_grpo():
    expected = [A1, -A1 / 3, -A1 / 3, -A1 / 3, A2, A2, -A2, -A2]
    torch.testing.assert_close(grpo_advantages(torch.tensor(REWARDS, dtype=torch.float32), 4), torch.tensor(expected))


def test_group_norm_reports_nothing_with_grpo_settings_and_the_base_figure_otherwise():
    b = batch(REWARDS, 4)
    grpo = GroupNorm(GroupNorm.Config())
    assert grpo.activity(b, grpo(b)[0]) is None
    # group_center (scale none): [.75, -.25, -.25, -.25, .5, .5, -.5, -.5]. Ratios to GRPO: 0.5001 on group 1,
    # 0.57745 on group 2; the lower median of the eight is 0.5001, so group 1 is GRPO up to that factor and the
    # four rows of group 2 (0.5 against 0.5001 * 0.86588 = 0.43303) differ: 4 of 8
    center = GroupNorm(GroupNorm.Config(scale="none"))
    assert center.activity(b, center(b)[0]) == 0.5
    # two groups of the same std (0.5): scale none is GRPO times one factor, 0.5001, and no row differs
    same = batch([1, 0, 0, 0, 0, 1, 0, 0], 4)
    assert center.activity(same, center(same)[0]) == 0.0


def test_token_advantages_are_compared_per_counted_token():
    # rewards [1, 0 | 0, 1], G = 2: GRPO +-0.5 / (sqrt(.5) + 1e-4) = +-0.70700 per row, broadcast over 3 tokens
    mask = [[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1]]
    b = batch([1, 0, 0, 1], 2, mask=mask, ids=[[0, 0, 0]] * 4)
    per_token = grpo_advantages(b.rewards, 2).unsqueeze(1).repeat(1, 3)
    per_token[0, 2] = 0.0  # a token the mask leaves out: not counted
    per_token[3, 0] = 5.0  # one counted token of 11 (ratio -7.07 does not move the median 1)
    assert Given(Given.Config()).activity(b, per_token) == 1 / 11
    # the same advantages with every token changed by one factor: 0
    assert Given(Given.Config()).activity(b, 3 * grpo_advantages(b.rewards, 2).unsqueeze(1).repeat(1, 3)) == 0.0


def test_all_equal_groups_leave_nothing_to_change():
    # every group all-equal: GRPO is 0 everywhere; an estimator that still pushes a row acts on it
    b = batch([1, 1, 0, 0], 2)
    assert Given(Given.Config()).activity(b, torch.zeros(4)) == 0.0
    assert Given(Given.Config()).activity(b, torch.tensor([0.0, 0.0, 0.3, 0.0])) == 0.25
