"""ICRL's self-critique rollout (rlpost/rollouts/self_critique.py) without a trainer: the critic reward, the
calibration ratio with its clipping, and the role-wise advantages of a small group, worked out by hand; bad
config is a ConfigError naming the keys."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.rollouts.self_critique import (
    CRITIC,
    REFINED,
    SelfCritique,
    calibration_weights,
    critic_advantages,
    critic_rewards,
    layout,
)

NAN = float("nan")
G, K = 5, 2  # layout: 1 natural, 2 critic, 2 refined rows


def test_layout():
    assert layout(G, K) == ["natural", CRITIC, CRITIC, REFINED, REFINED]
    assert layout(6, 2) == ["natural", "natural", CRITIC, CRITIC, REFINED, REFINED]


def test_critic_reward_is_the_gain_of_its_refinement_over_the_critiqued_attempt():
    # group 1: R(y0_0) = 0.2, refinements 1.0 and 0.0 -> critic rewards 1.0 - 0.2 = 0.8 and 0.0 - 0.2 = -0.2
    # group 2: R(y0_0) = 1.0 (correct), refinements 1.0 and NaN (unscorable) -> 0.0 and NaN
    rewards = torch.tensor([0.2, 9.0, 9.0, 1.0, 0.0, 1.0, 9.0, 9.0, 1.0, NAN])  # 9.0: the critic rows' own score
    out = critic_rewards(rewards, G, K)
    expected = torch.tensor([NAN, 0.8, -0.2, NAN, NAN, NAN, 0.0, NAN, NAN, NAN])
    assert torch.allclose(out, expected, equal_nan=True)


def test_critic_advantage_is_normalized_among_the_critic_rows_of_the_group():
    # group 1: critic rewards 0.8, -0.2: mean 0.3, unbiased std sqrt((0.5^2 + 0.5^2) / 1) = 0.70711
    #          A = +-0.5 / 0.70711 = +-0.70711 (eps 0); group 2: one scorable critic reward -> std NaN -> A = 0
    critic = torch.tensor([NAN, 0.8, -0.2, NAN, NAN, NAN, 0.0, NAN, NAN, NAN])
    adv = critic_advantages(critic, G, K, eps=0.0)
    expected = torch.tensor([0.0, 0.70711, -0.70711, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert torch.allclose(adv, expected, atol=1e-5)


def test_role_wise_advantages_of_a_small_group():
    # rewards R: y0_0 = 1, critiques (own score 0.3, 0.7), y1_0 = 0, y1_1 = 1
    # solver role (critic rows NaN, out of the group): [1, 0, 1]: mean 2/3, deviations 1/3, -2/3, 1/3,
    #   unbiased var (1/9 + 4/9 + 1/9) / 2 = 1/3, std 0.57735 -> A = 0.57735, -1.15470, 0.57735
    # critic role: gains 0 - 1 = -1, 1 - 1 = 0: mean -0.5, std 0.70711 -> A = -0.70711, 0.70711
    rewards = torch.tensor([1.0, 0.3, 0.7, 0.0, 1.0])
    strategy = SelfCritique(SelfCritique.Config(critiques_per_group=K, critic_eps=0.0))
    adjusted, metrics = strategy.adjust_rewards(rewards, layout(G, K), [{}] * G, [None] * G, G)
    assert torch.isnan(adjusted[1:3]).all() and torch.equal(adjusted[[0, 3, 4]], rewards[[0, 3, 4]])
    batch = GroupBatch(adjusted, adjusted.unsqueeze(1), ["r"], G, torch.ones(G, 1), torch.zeros(G, 1))
    solver, _ = GroupNorm(GroupNorm.Config(eps=0.0))(batch)
    assert torch.allclose(solver, torch.tensor([0.57735, 0.0, 0.0, -1.15470, 0.57735]), atol=1e-5)
    assert strategy._critic_adv is not None
    assert torch.allclose(strategy._critic_adv, torch.tensor([0.0, -0.70711, 0.70711, 0.0, 0.0]), atol=1e-5)
    assert metrics["self_critique/critic_reward_mean"] == pytest.approx(-0.5)
    assert metrics["self_critique/improvement_rate"] == 0.0  # neither refinement beat y0 (0 < 1, 1 = 1)
    assert metrics["self_critique/worsened_rate"] == 0.5
    assert metrics["self_critique/attempt_reward_mean"] == 1.0
    assert metrics["self_critique/refined_reward_mean"] == 0.5
    with pytest.raises(RuntimeError, match="layout"):  # rows not where the strategy put them
        strategy.adjust_rewards(rewards, ["natural"] * G, [{}] * G, [None] * G, G)


def test_calibration_ratio_with_clipping():
    # y1 has 2 tokens (3rd masked): pi(.|x) = 0.5, 0.2; pi(.|x, y0, c) = 0.25, 0.8 -> token ratios 2.0, 0.25
    plain = torch.tensor([[math.log(0.5), math.log(0.2), -9.0]])
    cond = torch.tensor([[math.log(0.25), math.log(0.8), -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # token level, clip [0.5, 1.0]: 2.0 -> 1.0, 0.25 -> 0.5, both outside the bounds; a masked token weighs 1
    w, clipped = calibration_weights(plain, cond, mask, "token", 0.5, 1.0)
    assert torch.allclose(w, torch.tensor([[1.0, 0.5, 1.0]]))
    assert clipped.tolist() == [[True, True, False]]
    # sequence level: geometric mean sqrt(2.0 * 0.25) = 0.70711, inside [0.5, 1.0], on every token of the row
    w, clipped = calibration_weights(plain, cond, mask, "sequence", 0.5, 1.0)
    assert torch.allclose(w, torch.tensor([[0.70711, 0.70711, 1.0]]), atol=1e-5)
    assert not clipped.any()
    # sequence level, clip [0.8, 1.0]: 0.70711 -> 0.8, clipped on both masked-in tokens
    w, clipped = calibration_weights(plain, cond, mask, "sequence", 0.8, 1.0)
    assert torch.allclose(w, torch.tensor([[0.8, 0.8, 1.0]]))
    assert clipped.tolist() == [[True, True, False]]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.num_generations=4", "train.completions_per_step=8"], "needs train.num_generations >= 5"),
        (["algorithm.rollout.critiques_per_group=1"], "critiques_per_group"),
        (["algorithm.rollout.ratio_low=2.0"], "ratio_low"),
        (["algorithm.rollout.ratio_level=row"], "ratio_level"),
        (["algorithm.rollout.refine_template=no placeholder"], "{critique}"),
    ],
)
def test_bad_self_critique_config_is_a_config_error(overrides, message):
    base = ["algorithm/rollout=self_critique", "train.num_generations=6", "train.completions_per_step=12"]
    with pytest.raises(ConfigError) as err:
        build_run(compose([*base, *overrides]))
    assert message in str(err.value)
