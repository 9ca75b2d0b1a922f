"""``RolloutStrategy.activity`` by hand: the share of rows that are not plain samples or whose reward
``adjust_rewards`` changed; the warning for a group left without a baseline (rlpost/rollouts/base.py)."""

from __future__ import annotations

import math

import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.rollouts.base import RolloutStrategy
from rlpost.rollouts.none import PlainRollout

NAN = math.nan


class Given(RolloutStrategy):
    def generate(self, prompts, ctx):
        raise NotImplementedError


def test_share_of_produced_or_adjusted_rows():
    kinds = ["natural", "forced_refusal", "natural", "natural"]
    before, after = torch.tensor([1.0, 0.0, 0.5, NAN]), torch.tensor([1.0, 0.0, 0.2, NAN])
    # row 1 was produced by the strategy, row 2's reward rewritten; NaN -> NaN is unchanged: 2 of 4
    assert Given(Given.Config()).activity(kinds, before, after) == 0.5
    # a row set to NaN leaves its group: changed
    assert Given(Given.Config()).activity(["natural"] * 2, torch.tensor([1.0, 0.0]), torch.tensor([1.0, NAN])) == 0.5
    # per reward term [N, R] (before a combine that returns advantages): a row counts when any term changed
    terms = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert Given(Given.Config()).activity(["natural"] * 2, terms, torch.tensor([[1.0, 0.0], [0.0, 0.5]])) == 0.5
    assert PlainRollout(PlainRollout.Config()).activity(["natural"], before[:1], before[:1]) is None


def test_show_warns_when_a_group_keeps_fewer_than_two_plain_samples():
    bandit = ["algorithm/rollout=intervention_bandit", "algorithm.rollout.probe=1"]
    warnings = build_run(compose(bandit)).config_warnings()
    assert any("leaving 1 plain sample(s) for the group's baseline" in w for w in warnings)
    assert not build_run(compose(["algorithm/rollout=intervention_bandit"])).config_warnings()  # probe 2 of G = 4
