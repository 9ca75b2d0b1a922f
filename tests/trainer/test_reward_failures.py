"""A reward term that raises or hangs never kills the run (rlpost/scoring/guard.py): skip -> NaN,
zero -> 0.0, abort -> RewardFailure naming term and sample; counted per step in the metrics."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.scoring.guard import FailurePolicy, GuardedReward, RewardFailure, take_failure_counts

from support.faults import broken_reward, slow_reward
from support.trainer import TINY, rlpost_trainer, step_logs


def raise_on_b(prompts, completions, **kwargs):
    """1.0 per completion, but the whole batch call raises when any completion is 'b'."""
    if "b" in completions:
        raise ValueError("cannot score 'b'")
    return [1.0 + len(kwargs["answer"][i]) for i in range(len(completions))]


def guarded(func, **policy) -> GuardedReward:
    g = GuardedReward(func, FailurePolicy(**policy))
    g.__name__ = "term"
    return g


@pytest.mark.parametrize(("policy", "fill"), [("skip", None), ("zero", 0.0)])
def test_only_the_failing_sample_takes_the_policy(policy, fill):
    reward = guarded(raise_on_b, on_failure=policy)
    # the batch call raises; per-sample calls get their own slice of the answer column
    out = reward(["p"] * 3, ["a", "b", "c"], answer=["x", "yy", "zzz"], trainer_state=None)
    assert out == [2.0, fill, 4.0]
    assert take_failure_counts([reward]) == {"term": 1} and reward.failures == 0  # counted, then drained


def test_abort_names_term_sample_and_error():
    reward = guarded(raise_on_b, on_failure="abort")
    with pytest.raises(RewardFailure, match=r"reward term 'term' failed on sample 1 .*ValueError: cannot score 'b'"):
        reward(["p0", "p1"], ["a", "b"], answer=["x", "y"])


def test_timeout_fails_the_whole_batch_without_retry():
    reward = guarded(slow_reward, on_failure="zero", timeout_s=0.2)
    assert reward(["p"] * 4, ["a"] * 4) == [0.0] * 4
    assert reward.take_failures() == 4


def test_wrong_length_and_a_dead_service_are_failures():
    assert guarded(lambda prompts, completions, **k: [1.0], on_failure="skip")(["p", "p"], ["a", "b"]) == [1.0, 1.0]
    reward = guarded(broken_reward)
    assert reward(["p"] * 2, ["a", "b"]) == [None, None] and reward.take_failures() == 2


def test_policy_from_config_global_and_per_term():
    terms = (
        "reward.terms=[{name: callable, params: {path: 'support.rewards:text_hash_reward'}},"
        " {name: callable, on_failure: abort, timeout_s: 2.5, params: {path: 'support.faults:flaky_reward'}}]"
    )
    run = build_run(compose([*TINY, terms, "reward.on_failure=zero"]))
    assert run.reward.failure == [FailurePolicy("zero", None), FailurePolicy("abort", 2.5)]
    with pytest.raises(
        ConfigError, match=r"Invalid value reward.on_failure='ignore'. Valid choices: skip, zero, abort"
    ):
        build_run(compose([*TINY, "reward.on_failure=ignore"]))


def test_training_survives_a_raising_reward_and_logs_the_failures(tmp_path):
    terms = (
        "reward.terms=[{name: callable, params: {path: 'support.rewards:text_hash_reward'}},"
        " {name: callable, params: {path: 'support.faults:flaky_reward'}}]"
    )
    run = build_run(compose([*TINY, terms, "train.steps=2"]))
    trainer = rlpost_trainer(run, tmp_path)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    logs = step_logs(trainer)
    assert len(logs) == 2
    failures = [log["rlpost/reward_failures/callable_2"] for log in logs]
    assert sum(failures) > 0 and all(log["rlpost/reward_failures/callable"] == 0 for log in logs)
    assert all(math.isfinite(log["loss"]) and math.isfinite(log["rlpost/reward"]) for log in logs)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_a_judge_that_asked_to_abort_is_not_skipped():
    from rlpost.judges.base import JudgeError

    def judged(prompts, completions, **kwargs):
        raise JudgeError("judge openai: 1 of 1 prompts failed (first: URLError refused); on_failure=abort")

    with pytest.raises(JudgeError, match="on_failure=abort"):
        guarded(judged, on_failure="skip")(["p"], ["a"])
