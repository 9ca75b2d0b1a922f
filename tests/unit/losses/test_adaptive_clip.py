"""``adaptive_clip``: CRPO's complexity-adaptive clip range (rlpost/losses/adaptive_clip.py), by hand and in
two real trainer steps."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.losses.adaptive_clip import COMPLEXITY_KEY, AdaptiveClip, profile_complexity
from rlpost.losses.base import LossInputs

from support.trainer import make_run, rlpost_trainer, step_logs


def inputs(ratio: float, advantage: float, complexity: list[float]) -> LossInputs:
    b = len(complexity)
    logps = torch.full((b, 1), math.log(ratio))
    return LossInputs(
        logps=logps,
        old_logps=torch.zeros(b, 1),
        advantages=torch.full((b,), advantage),
        mask=torch.ones(b, 1),
        batch={COMPLEXITY_KEY: torch.tensor(complexity)},
    )


def test_clip_range_scales_with_complexity_by_hand():
    loss = AdaptiveClip(AdaptiveClip.Config())  # eps 0.2, s = 0.5 + 1.0 * c
    # r = 1.4, A = +1. c = 0: s = 0.5, clip at 1 + 0.1 -> -1.1; c = 1: s = 1.5, clip at 1.3 -> -1.3; c = 0.5: s = 1, 1.2
    out, m = loss(inputs(1.4, 1.0, [0.0, 1.0, 0.5]))
    assert out.squeeze(1).tolist() == pytest.approx([-1.1, -1.3, -1.2])
    assert m["adaptive_clip/complexity_mean"] == pytest.approx(0.5)
    assert m["adaptive_clip/epsilon_high_mean"] == pytest.approx((0.1 + 0.3 + 0.2) / 3)
    # spread of the per-row ranges [0.1, 0.3, 0.2] around 0.2: population std sqrt((0.01 + 0.01 + 0) / 3)
    assert m["adaptive_clip/epsilon_high_std"] == pytest.approx(math.sqrt(0.02 / 3))
    assert m["clip_ratio/high_mean"] == 1.0  # every token is past its own upper bound
    # r = 0.6, A = -1: l = -min(-0.6, -clip(0.6)) = clip(0.6); c = 0 clips at 0.9, c = 1 at 0.7
    out, _ = loss(inputs(0.6, -1.0, [0.0, 1.0]))
    assert out.squeeze(1).tolist() == pytest.approx([0.9, 0.7])
    # inside every range the ratio is unclipped: l = -r * A
    out, _ = loss(inputs(1.05, 2.0, [0.0, 1.0]))
    assert out.squeeze(1).tolist() == pytest.approx([-2.1, -2.1])


def test_complexity_from_a_column_or_the_profile_by_hand():
    # distinct words of >= 3 letters: the, brave, old, knight, and -> 5 of 10
    assert profile_complexity("The brave old knight, brave and old. A 42", 10) == 0.5
    assert profile_complexity("", 10) == 0.5 and profile_complexity("one two three four", 2) == 1.0
    by_column = AdaptiveClip(AdaptiveClip.Config(complexity_column="c"))
    assert [by_column.complexity({"c": v}) for v in (0.25, 3.0, -1.0, None)] == [0.25, 1.0, 0.0, 0.5]
    by_profile = AdaptiveClip(AdaptiveClip.Config(profile_column="persona", words_for_full=10))
    assert by_profile.complexity({"persona": "The brave old knight, brave and old."}) == 0.5
    with pytest.raises(ConfigError, match="min_scale=2.0 must be <= max_scale=1.5"):
        build_config(AdaptiveClip.Config, {"min_scale": 2.0}, "algorithm.loss")
    with pytest.raises(ConfigError, match="max_scale \\* epsilon_low = 1"):
        build_config(AdaptiveClip.Config, {"max_scale": 5.0}, "algorithm.loss")


def test_two_trainer_steps_with_the_complexity_of_each_prompt(tmp_path):
    run = make_run(["algorithm/loss=adaptive_clip", "train.steps=2", "train.num_iterations=2"])
    trainer = rlpost_trainer(run, tmp_path)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, trainer.model.parameters()))
    logs = step_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        c = log["adaptive_clip/complexity_mean"]
        assert 0.0 < c <= 1.0 and log["adaptive_clip/epsilon_high_mean"] == pytest.approx(0.2 * (0.5 + c), rel=1e-5)
        assert math.isfinite(log["loss"])
