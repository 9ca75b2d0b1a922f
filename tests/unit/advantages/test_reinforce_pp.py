"""REINFORCE++ and REINFORCE++-baseline (arXiv 2501.03262, verl's variant) on hand-worked numbers."""

import math

import pytest
import torch

from rlpost.advantages.base import ADVANTAGES, GroupBatch
from rlpost.advantages.gae import masked_whiten
from rlpost.advantages.reinforce_pp import ReinforcePP


def batch(rewards, lengths, g=2, t=3):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    mask = torch.tensor([[1.0] * n + [0.0] * (t - n) for n in lengths])
    return GroupBatch(rewards, rewards[:, None], ["r"], g, mask, torch.zeros(len(lengths), t, dtype=torch.long))


def advantages(rewards, lengths, baseline="none", g=2):
    out, _ = ReinforcePP(ReinforcePP.Config(baseline=baseline))(batch(rewards, lengths, g))
    return out


def test_registered():
    assert ADVANTAGES.get("reinforce_pp") is ReinforcePP


def test_batch_whitening_hand_worked():
    # one token each: s = [3, 1, 2, 2], mu = 2, unbiased var = (1 + 1 + 0 + 0) / 3 = 2/3 -> A = (s - 2) * sqrt(3/2)
    a = math.sqrt(1.5)
    torch.testing.assert_close(advantages([3.0, 1.0, 2.0, 2.0], [1, 1, 1, 1]), torch.tensor([a, -a, 0.0, 0.0]))
    # the group of [2, 2] still gets 0 and the first group +-1.22, not GRPO's +-0.71 (its std is the batch's)


def test_statistics_are_over_tokens_not_completions():
    # s = [1, 0] with 3 and 1 counted tokens: mu = 3/4; var = (3 * (1/4)^2 + (3/4)^2) / (4 - 1) = 1/4 -> std 1/2
    # -> A = [(1 - 3/4) / (1/2), (0 - 3/4) / (1/2)] = [0.5, -1.5]. Per completion (mu 1/2) it would be +-0.71.
    torch.testing.assert_close(advantages([1.0, 0.0], [3, 1]), torch.tensor([0.5, -1.5]), atol=1e-6, rtol=1e-6)
    # the same as verl's masked_whiten of the return tiled over each completion's tokens
    b = batch([1.0, 0.0], [3, 1])
    tiled = masked_whiten(b.rewards[:, None] * b.completion_mask, b.completion_mask)
    torch.testing.assert_close(tiled[:, 0], advantages([1.0, 0.0], [3, 1]), atol=1e-6, rtol=1e-6)


def test_group_baseline_hand_worked():
    # r = [1, 0 | 3, 1]: s = r - group mean = [0.5, -0.5, 1, -1]; mu = 0; var = (0.25 + 0.25 + 1 + 1) / 3 = 5/6
    s = torch.tensor([0.5, -0.5, 1.0, -1.0])
    expected = s / math.sqrt(5 / 6)  # [0.548, -0.548, 1.095, -1.095]
    torch.testing.assert_close(advantages([1.0, 0.0, 3.0, 1.0], [1, 1, 1, 1], "group"), expected)
    # without the baseline: s = r, mu = 5/4, var = (1/16 + 25/16 + 49/16 + 1/16) / 3 = 19/12
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])
    torch.testing.assert_close(advantages(r.tolist(), [1, 1, 1, 1]), (r - 1.25) / math.sqrt(19 / 12))


def test_unscorable_rewards_get_zero_and_stay_out_of_the_statistics():
    nan = float("nan")
    # the NaN row is left out of the group mean (group 1: mean of [2] = 2 -> s = 0) and of mu, var;
    # s = [0, -, 0.5, -0.5] over 3 tokens: mu = 0, var = 0.5 / 2 = 1/4 -> A = [0, 0, 1, -1]
    out = advantages([2.0, nan, 1.0, 0.0], [1, 1, 1, 1], "group")
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, 1.0, -1.0]), atol=1e-6, rtol=1e-6)
    assert torch.equal(advantages([nan, nan], [1, 1]), torch.zeros(2))
    assert torch.equal(advantages([1.0, 1.0], [2, 2]), torch.zeros(2))  # no spread: 0, not NaN


def test_metrics_config_and_describe():
    _, metrics = ReinforcePP(ReinforcePP.Config())(batch([3.0, 1.0, 2.0, 2.0], [1, 1, 1, 1]))
    assert metrics["reinforce_pp/return_std"] == pytest.approx(math.sqrt(2 / 3))
    assert metrics["advantage/mean"] == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError):
        ReinforcePP.Config(baseline="batch")
    assert "REINFORCE++-baseline" in ReinforcePP(ReinforcePP.Config(baseline="group")).describe()
