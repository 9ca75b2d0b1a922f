"""Hand-computed checks of group_norm and the DAPO filters (every number worked out in comments)."""

import math

import pytest
import torch

from rlpost.advantages.base import ADVANTAGES, GroupBatch
from rlpost.advantages.group_norm import GroupNorm, nanstd
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.pipeline import soft_overlong_penalty, zero_variance_groups

NAN = float("nan")
S3 = math.sqrt(1 / 3)  # 0.5773503: unbiased std of [1, 0, 0, 1] (sum sq dev 4 * 0.25 = 1, / (4 - 1))


def batch(rewards, g):
    r = torch.tensor(rewards, dtype=torch.float32)
    n = r.numel()
    return GroupBatch(
        rewards=r,
        reward_terms=r[:, None],
        term_names=["r"],
        num_generations=g,
        completion_mask=torch.ones(n, 3),
        completion_ids=torch.zeros(n, 3, dtype=torch.long),
    )


def adv(rewards, g, **cfg):
    return GroupNorm(GroupNorm.Config(**cfg))(batch(rewards, g))


def close(a, b):
    torch.testing.assert_close(a, torch.tensor(b, dtype=a.dtype), rtol=1e-6, atol=1e-7)


def test_registered():
    assert ADVANTAGES.get("group_norm") is GroupNorm


def test_group_scaling_hand_computed():
    # group 1: mean 0.5, std sqrt(1/3) = 0.57735 -> A = +-0.5 / (0.57735 + 1e-4) = +-0.865875
    # group 2: all equal -> std 0 -> A = 0 / (0 + 1e-4) = 0
    a, m = adv([1, 0, 0, 1, 2, 2, 2, 2], 4)
    x = 0.5 / (S3 + 1e-4)
    close(a, [x, -x, -x, x, 0, 0, 0, 0])
    assert m["frac_reward_zero_std"] == 0.5
    assert m["advantage/mean"] == pytest.approx(0.0, abs=1e-7)
    assert m["advantage/abs_mean"] == pytest.approx(4 * x / 8)
    # unbiased std of [x,-x,-x,x,0,0,0,0]: sum sq 4x^2, / 7
    assert m["advantage/std"] == pytest.approx(math.sqrt(4 * x * x / 7), rel=1e-6)


def test_all_equal_rewards_give_zero():
    a, m = adv([0.3, 0.3, 0.3], 3)
    close(a, [0.0, 0.0, 0.0])
    assert m["frac_reward_zero_std"] == 1.0


def test_one_sample_groups():
    # G = 1: r - mean(r) = 0 and TRL uses std 0 -> A = 0 for every row
    a, m = adv([1.0, 0.0, 3.0], 1)
    close(a, [0.0, 0.0, 0.0])
    assert m["frac_reward_zero_std"] == 1.0
    a, _ = adv([1.0, 0.0, 3.0], 1, leave_one_out=True)  # no "others": 0
    close(a, [0.0, 0.0, 0.0])


def test_nan_rewards_excluded():
    # [1, nan, 0, 0]: nanmean 1/3; deviations 2/3, -1/3, -1/3 -> sum sq 6/9, / (3-1) = 1/3 -> std 0.57735
    # A = [ (2/3)/(s+1e-4), 0 (unscorable), (-1/3)/(s+1e-4), same ]
    a, _ = adv([1, NAN, 0, 0], 4)
    d = S3 + 1e-4
    close(a, [(2 / 3) / d, 0.0, (-1 / 3) / d, (-1 / 3) / d])
    # a group with one scorable reward: std NaN -> all 0; an all-NaN group -> all 0
    a, m = adv([NAN, 1.0, NAN, NAN], 2)
    close(a, [0.0, 0.0, 0.0, 0.0])
    assert m["frac_reward_zero_std"] == 1.0


def test_scale_none_is_dr_grpo():
    a, _ = adv([1, 0, 0, 1], 4, scale="none")
    close(a, [0.5, -0.5, -0.5, 0.5])


def test_batch_scaling():
    # groups [1, 0] and [0, 0]: group means 0.5 and 0 (the mean stays per group)
    # batch std of [1,0,0,0]: mean 0.25, sum sq 0.5625 + 3 * 0.0625 = 0.75, / 3 = 0.25 -> std 0.5
    a, _ = adv([1, 0, 0, 0], 2, scale="batch")
    close(a, [0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0])


def test_leave_one_out():
    # [1, 0, 0, 0]: A_0 = 1 - (0+0+0)/3 = 1; A_i = 0 - (1+0+0)/3 = -1/3
    a, _ = adv([1, 0, 0, 0], 4, leave_one_out=True, scale="none")
    close(a, [1.0, -1 / 3, -1 / 3, -1 / 3])
    # = G/(G-1) * (r - mean): 4/3 * 0.75 = 1, 4/3 * -0.25 = -1/3. With group scaling: / (std 0.5 + 1e-4)
    a, _ = adv([1, 0, 0, 0], 4, leave_one_out=True)
    close(a, [1 / 0.5001, (-1 / 3) / 0.5001, (-1 / 3) / 0.5001, (-1 / 3) / 0.5001])
    # with a NaN: scorable [1, _, 0, 0] (n=3, sum 1): A_0 = 1 - 0/2 = 1, A_2 = 0 - 1/2 = -0.5, A_1 = 0
    a, _ = adv([1, NAN, 0, 0], 4, leave_one_out=True, scale="none")
    close(a, [1.0, 0.0, -0.5, -0.5])


def test_nanstd_matches_trl():
    from trl.trainer.utils import nanstd as trl_nanstd

    x = torch.tensor([[1.0, NAN, 0.0, 2.0], [NAN, NAN, 3.0, NAN], [0.5, 0.1, 0.2, 0.9]])
    torch.testing.assert_close(nanstd(x, dim=1), trl_nanstd(x, dim=1), equal_nan=True)
    torch.testing.assert_close(nanstd(x), trl_nanstd(x))


def test_config_and_describe():
    with pytest.raises(ConfigError):
        build_config(GroupNorm.Config, {"scale": "grup"}, "algorithm.advantage")
    assert (
        GroupNorm(GroupNorm.Config()).describe()
        == "A = (r - mean_group(r)) / (std_group(r) + 0.0001), std unbiased, NaN rewards -> A = 0"
    )
    assert GroupNorm(GroupNorm.Config(scale="none", leave_one_out=True)).describe() == (
        "A = r - mean of the other G-1 rewards"
    )
    with pytest.raises(ValueError):
        adv([1, 0, 0], 2)


def test_zero_variance_groups():
    r = torch.tensor([1, 1, 0, 1, 0, 0, 0, 0, NAN, 1, 1, 1, NAN, NAN, NAN, 1])
    got = zero_variance_groups(r, 4)
    # mixed -> keep; all 0 -> drop; scorable all 1 -> drop; one scorable -> drop
    assert got.tolist() == [False] * 4 + [True] * 4 + [True] * 4 + [True] * 4
    assert zero_variance_groups(torch.tensor([0.5, 0.5, 0.5, 0.25]), 2).tolist() == [True, True, False, False]


def test_soft_overlong_penalty_three_regimes():
    # max 100, cache 20: buffer starts at 80. L=50, 80 -> 0; L=90 -> (80-90)/20 = -0.5; L=100 -> -1; L=120 -> -1
    lengths = torch.tensor([50, 80, 90, 100, 120])
    close(soft_overlong_penalty(lengths, 100, 20), [0.0, 0.0, -0.5, -1.0, -1.0])
    close(soft_overlong_penalty(lengths, 100, 20, factor=2.0), [0.0, 0.0, -1.0, -2.0, -2.0])
    # L=95 -> (80-95)/20 = -0.75
    close(soft_overlong_penalty(torch.tensor([95]), 100, 20), [-0.75])
    # no buffer (cache 0): 0 up to max_len, -factor beyond (TRL's rule)
    close(soft_overlong_penalty(torch.tensor([100, 101]), 100, 0), [0.0, -1.0])
    with pytest.raises(ValueError):
        soft_overlong_penalty(lengths, 100, 200)


def test_soft_overlong_matches_trl():
    from trl.rewards import get_soft_overlong_punishment

    lengths = list(range(70, 110, 3))
    ref = get_soft_overlong_punishment(100, 20)([[0] * n for n in lengths])
    close(soft_overlong_penalty(torch.tensor(lengths), 100, 20), ref)
