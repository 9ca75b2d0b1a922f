"""The reward-to-advantage pipeline (rlpost/pipeline.py) on hand-made tensors: no model, no trainer."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.pipeline import Advantages, PipelineInputs, Rewards, run_pipeline

from support.trainer import TINY

TWO_TERMS = "reward.terms=[{name: exact_match, weight: 1.0}, {name: exact_match, weight: 0.5}]"


def inputs(terms, lengths, training=True, max_len=8):
    n = len(lengths)
    mask = torch.ones(n, max_len)
    return PipelineInputs(
        reward_terms=torch.tensor(terms),
        num_generations=2,
        completion_ids=torch.zeros(n, max_len, dtype=torch.long),
        completion_mask=mask,
        loss_mask=mask,
        lengths=torch.tensor(lengths),
        max_completion_length=max_len,
        training=training,
        rows=[{}] * n,
        completions=[""] * n,
    )


def test_combine_shape_advantage_keep_by_hand():
    run = build_run(
        compose(
            [*TINY, TWO_TERMS, "algorithm.dynamic_sampling=true", "algorithm.overlong.soft_penalty=true",
             "algorithm.overlong.cache_len=4"]
        )
    )  # fmt: skip
    # rows 0,1 are group 0; rows 2,3 group 1. weighted sum: r = t0 + 0.5 * t1
    terms = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]]  # task r = [1.0, 0.5, 1.5, 1.5]
    # soft overlong, max 8, cache 4: L <= 4 -> 0; L=6 -> (4 - 6) / 4 = -0.5; L=8 -> (4 - 8) / 4 = -1
    result = run_pipeline(inputs(terms, [2, 6, 8, 4]), run.reward, run.algorithm)
    assert isinstance(result.rewards, Rewards) and isinstance(result.advantages, Advantages)
    assert result.task_rewards.values.tolist() == pytest.approx([1.0, 0.5, 1.5, 1.5])
    assert result.rewards.values.tolist() == pytest.approx([1.0, 0.0, 0.5, 1.5])  # task + penalty
    # group_norm: group 0 rewards [1, 0]: mean 0.5, unbiased std sqrt(0.5); A = +-0.5 / (0.70711 + 1e-4)
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    # group 1 rewards [0.5, 1.5] after shaping: the same +-a, but its task rewards are equal (1.5, 1.5)
    assert result.advantages.values.tolist() == pytest.approx([a, -a, -a, a], abs=1e-6)
    assert result.keep.tolist() == [1.0, 1.0, 0.0, 0.0]  # dynamic sampling reads the task reward
    assert result.metrics["dynamic_sampling/kept_fraction"] == 0.5
    assert result.metrics["overlong/penalty_mean"] == pytest.approx((0 - 0.5 - 1 + 0) / 4)
    assert result.metrics["reward"] == pytest.approx((1.0 + 0.0 + 0.5 + 1.5) / 4)


def test_evaluation_batches_are_not_filtered():
    run = build_run(compose([*TINY, TWO_TERMS, "algorithm.dynamic_sampling=true"]))
    result = run_pipeline(inputs([[1.0, 1.0]] * 4, [2, 2, 2, 2], training=False), run.reward, run.algorithm)
    assert result.keep.tolist() == [1.0] * 4 and "dynamic_sampling/kept_fraction" not in result.metrics
    assert result.advantages.values.tolist() == [0.0] * 4  # equal rewards: zero advantage
