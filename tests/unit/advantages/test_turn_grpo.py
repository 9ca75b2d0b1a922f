"""turn_grpo: per-turn reward-to-go advantages of episodes, worked out by hand."""

from __future__ import annotations

import pytest
import torch

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.advantages.turn_grpo import TurnGRPO


def batch(rewards, rows, width=6):
    n = len(rewards)
    return GroupBatch(
        rewards=torch.tensor(rewards),
        reward_terms=torch.tensor(rewards).view(n, 1),
        term_names=["env"],
        num_generations=2,
        completion_mask=torch.ones(n, width),
        completion_ids=torch.zeros(n, width, dtype=torch.long),
        rows=rows,
    )


def test_reward_to_go_over_the_group_baseline_by_hand():
    # One group of G=2 episodes, env weight 1.
    #   A: turn rewards [-0.1, 1.0], turns at tokens [0,2) and [4,5): r_A = 0.9
    #   B: turn rewards [-0.1, -0.1], turns at tokens [0,1) and [3,4): r_B = -0.2
    # baseline = mean(0.9, -0.2) = 0.35; std (Bessel) = 1.1 / sqrt(2) = 0.7778175
    #   A turn 1: R = 0.9               -> (0.9 - 0.35) / 0.7778175 =  0.7071068
    #   A turn 2: R = 0.9 - (-0.1) = 1.0 -> (1.0 - 0.35) / 0.7778175 =  0.8356716
    #   B turn 1: R = -0.2              -> -0.7071068
    #   B turn 2: R = -0.2 + 0.1 = -0.1 -> (-0.1 - 0.35) / 0.7778175 = -0.5785419
    rows = [
        {"rlpost_env_spans": [[0, 2], [4, 5]], "rlpost_env_turn_rewards": [-0.1, 1.0]},
        {"rlpost_env_spans": [[0, 1], [3, 4]], "rlpost_env_turn_rewards": [-0.1, -0.1]},
    ]
    adv, _ = TurnGRPO(TurnGRPO.Config(eps=0.0))(batch([0.9, -0.2], rows))
    a, b, c, d = 0.7071068, 0.8356716, -0.7071068, -0.5785419
    expected = torch.tensor([[a, a, 0, 0, b, 0], [c, 0, 0, d, 0, 0]])
    assert torch.allclose(adv, expected, atol=1e-6)


def test_with_rewards_only_at_the_end_it_is_group_norm():
    rows = [
        {"rlpost_env_spans": [[0, 3]], "rlpost_env_turn_rewards": [1.0]},
        {"rlpost_env_spans": [[0, 1], [2, 6]], "rlpost_env_turn_rewards": [0.0, 0.0]},
    ]
    adv, _ = TurnGRPO(TurnGRPO.Config())(batch([1.0, 0.0], rows))
    flat, _ = GroupNorm(GroupNorm.Config())(batch([1.0, 0.0], rows))
    assert adv[0, :3].tolist() == pytest.approx([flat[0].item()] * 3)
    assert adv[1, [0, 2, 3, 4, 5]].tolist() == pytest.approx([flat[1].item()] * 5)
    assert adv[1, 1].item() == 0.0 and adv[0, 3:].abs().sum() == 0  # observation tokens


def test_env_weight_scales_the_earned_rewards():
    # weight 2: R_A,2 = 0.9 - 2 * (-0.1) = 1.1 -> (1.1 - 0.35) / 0.7778175 = 0.9642365
    rows = [
        {"rlpost_env_spans": [[0, 1], [1, 2]], "rlpost_env_turn_rewards": [-0.1, 1.0]},
        {"rlpost_env_spans": [[0, 1]], "rlpost_env_turn_rewards": [-0.2]},
    ]
    turn = TurnGRPO(TurnGRPO.Config(eps=0.0))
    turn.env_weight = 2.0
    adv, _ = turn(batch([0.9, -0.2], rows))
    assert adv[0, 1].item() == pytest.approx(0.9642365, abs=1e-6)
