"""Combiners that return advantages (odrpo, rdpo, decoupled) through the pipeline (issue 20, composition safety).

Their output is an advantage: it reaches the loss unchanged (no group_norm after it), a relative rollout
adjustment runs on each reward term before it, and every stage that would treat it as a reward is
refused before a model loads, with the reason.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.pipeline import run_pipeline
from rlpost.rollouts.generic_negative import KIND as GENERIC

from support.pipeline import pipeline_inputs
from support.trainer import HASH_REWARD, TINY

ONE_TERM = "reward.terms=[{name: exact_match, weight: 1.0}]"
EPS = 1e-4


def test_odrpo_advantages_reach_the_loss_without_a_second_group_norm():
    # the default algorithm=grpo has algorithm/advantage=group_norm: odrpo takes its place
    # levels 0..2 need a term that can score 2: a callable, which declares no range (exact_match's [0, 1] is refused)
    run = build_run(compose([*TINY, HASH_REWARD, "reward/combine=odrpo", "reward.combine.min_score=0",
                             "reward.combine.max_score=2", "algorithm.dynamic_sampling=true"]))  # fmt: skip
    # group 0 scores [0, 1, 2, 2]; group 1 scores [1, 1, 1, 1]; thresholds k = 1, 2
    terms = [[0.0], [1.0], [2.0], [2.0], [1.0], [1.0], [1.0], [1.0]]
    result = run_pipeline(pipeline_inputs(terms, 4), run.reward, run.algorithm)
    # k=1: b = [0,1,1,1], mean 0.75, unbiased std sqrt((0.5625 + 3 * 0.0625) / 3) = 0.5
    a1 = [(b - 0.75) / (0.5 + EPS) for b in (0, 1, 1, 1)]
    # k=2: b = [0,0,1,1], mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3)
    a2 = [(b - 0.5) / (math.sqrt(1 / 3) + EPS) for b in (0, 0, 1, 1)]
    expected = [x + y for x, y in zip(a1, a2)] + [0.0] * 4  # group 1 passes k=1 and fails k=2 everywhere
    assert result.advantages.values.tolist() == pytest.approx(expected, abs=1e-6)
    # a group_norm after it would have re-standardized group 0 to unit std; the sum [-2.366, -0.366, 1.366, 1.366]
    # has mean 0 and unbiased std sqrt((5.596 + 0.134 + 2 * 1.866) / 3) = 1.776
    assert torch.tensor(expected[:4]).std().item() == pytest.approx(1.776, abs=1e-3)
    assert result.task_rewards.values.tolist() == terms_flat(terms)  # the score, not the advantage
    assert result.metrics["reward"] == pytest.approx(sum(terms_flat(terms)) / 8)
    assert result.metrics["advantage/abs_mean"] == pytest.approx(sum(abs(a) for a in expected) / 8)
    assert result.keep.tolist() == [1.0] * 4 + [0.0] * 4  # dynamic sampling: group 1's advantages are all 0


def terms_flat(terms):
    return [row[0] for row in terms]


def test_decoupled_with_generic_negatives_adjusts_each_term_before_the_combine():
    # CRPO's two parts together: decoupled task/style advantages and a generic response as the negative baseline
    run = build_run(compose([*TINY, "reward=math_answer_format", "reward/combine=decoupled",
                             "algorithm/rollout=generic_negative", "algorithm.rollout.margin=1.0"]))  # fmt: skip
    # one group of G=3: two natural rollouts, then the generic response; columns [math_answer, format]
    terms = [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    result = run_pipeline(pipeline_inputs(terms, 3, kinds=["natural", "natural", GENERIC]), run.reward, run.algorithm)
    # per term, the generic row becomes the natural minimum minus the margin: math 0 - 1, format 0 - 1
    # task part (weight 1.0):  [1, 0, -1]   mean 0, unbiased std sqrt((1 + 0 + 1) / 2) = 1
    # style part (weight 0.1): [0.1, 0, -0.1]  mean 0, unbiased std 0.1
    a = 1 / (1 + EPS) + 0.1 / (0.1 + EPS)
    assert result.advantages.values.tolist() == pytest.approx([a, 0.0, -a], abs=1e-6)
    # the logged reward is the weighted sum of the adjusted terms
    assert result.task_rewards.values.tolist() == pytest.approx([1.1, 0.0, -1.1])
    assert result.metrics["generic_negative/reward_mean/math_answer"] == -1.0
    assert result.metrics["generic_negative/reward_mean/format"] == -1.0


def test_evaluation_reports_the_score_of_an_advantage_combine():
    run = build_run(compose([*TINY, HASH_REWARD, "reward/combine=odrpo", "reward.combine.min_score=0",
                             "reward.combine.max_score=2"]))  # fmt: skip
    scores = torch.tensor([[0.0], [2.0]])
    reward, _ = run.reward.scored(scores, 1)  # what eval/reward averages
    assert reward.tolist() == [0.0, 2.0]  # not a group-centred advantage (0 with groups of one)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (["reward/combine=odrpo", "algorithm/advantage=gepo"], "algorithm/advantage=gepo would estimate"),
        (["reward/combine=rdpo", "algorithm=gepo"], "algorithm/advantage=gepo would estimate"),
        (["reward/combine=odrpo", "algorithm/rollout=forced_refusal"], "writes absolute reward values"),
        (["reward/combine=rdpo", "algorithm/safety=kit"], "whiten_rewards"),
        (["reward/combine=odrpo", "algorithm=dapo", "algorithm.overlong.cache_len=4"], "overlong.soft_penalty"),
        (["reward/combine=odrpo", "algorithm.kl.coef=0.1", "algorithm.kl.placement=reward"], "kl.placement=reward"),
        (
            ["reward=math_answer_format", "reward/combine=decoupled", "algorithm=ppo"],
            "algorithm/advantage=gae would estimate",
        ),
    ],
)
def test_stages_that_would_read_advantages_as_rewards_are_refused(overrides, reason):
    with pytest.raises(ConfigError, match=reason.replace(".", r"\.")):
        build_run(compose([*TINY, *overrides]))


@pytest.mark.parametrize(
    "overrides",
    [
        ["reward/combine=odrpo", "algorithm=dr_grpo"],  # group_center: the baseline the combine applies
        ["reward/combine=odrpo", "algorithm=rloo"],
        ["reward/combine=odrpo", "algorithm=dapo", "algorithm.overlong.soft_penalty=false"],
        ["reward/combine=rdpo", "algorithm/correction=tis"],
        ["reward/combine=odrpo", "algorithm.kl.coef=0.1"],  # KL in the loss reads no reward
        ["reward=math_answer_format", "reward/combine=decoupled", "algorithm/rollout=generic_negative"],
    ],
)
def test_stages_that_never_read_a_reward_compose(overrides):
    run = build_run(compose([*TINY, *overrides]))
    assert run.reward.combine.produces == "advantages"
