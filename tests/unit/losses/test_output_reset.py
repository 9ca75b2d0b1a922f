"""Output Reset (seed 000 #29): hand-computed loss, gradients and diagnostics, composition, and 3 real steps.

Default config: m = 0.2 in both directions, normalize=true, so per token (r = log pi - log pi_old)::

    e = relu(m - sign(A) * r),   loss = |A| * e^2 / (2m) = |A| * e^2 / 0.4,   d loss / d log pi = -A * e / m
"""

import math

import pytest
import torch

from rlpost import cli
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.losses.base import LOSSES, LossInputs
from rlpost.losses.clip import Clip
from rlpost.losses.diagnostics import or_diagnostics
from rlpost.losses.output_reset import OutputReset

from support.trainer import make_run, step_logs, train_rlpost

METRICS = ("or/residual_mean", "or/overshoot_frac", "or/log_ratio_displacement", "or/log_ratio_abs_mean")


def close(a, b):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), rtol=1e-9, atol=1e-12)


def inputs(log_ratios, advantages, mask=None):
    """LossInputs whose token log-ratios log pi - log pi_old are exactly ``log_ratios``."""
    r = torch.tensor(log_ratios, dtype=torch.float64)
    old_logps = torch.full_like(r, -1.0)
    logps = (old_logps + r).requires_grad_(True)
    m = torch.ones_like(r) if mask is None else torch.tensor(mask, dtype=torch.float64)
    adv = torch.tensor(advantages, dtype=torch.float64)
    return LossInputs(logps=logps, old_logps=old_logps, advantages=adv, mask=m)


def test_registered_with_seed_and_describe():
    assert LOSSES.get("output_reset") is OutputReset and OutputReset.seed == "seed 000 #29"
    text = OutputReset(OutputReset.Config(margin_high=0.1, margin_low=0.3)).describe()
    assert "relu(m - sign(A)*r)^2 / (2m)" in text and "m = 0.1 (A>0) / 0.3 (A<0)" in text
    assert "^2 / 2," in OutputReset(OutputReset.Config(normalize=False)).describe()


def test_positive_and_negative_advantages_before_and_past_the_margin():
    # seq 0, A = +2 (s = +1): r = 0    -> e = 0.2, loss = 2*0.04/0.4 = 0.2,   grad = -2*0.2/0.2 = -2
    #                         r = 0.1  -> e = 0.1, loss = 2*0.01/0.4 = 0.05,  grad = -1
    #                         r = 0.3  -> s*r = 0.3 >= 0.2: e = 0, loss 0, grad 0 (overshoot)
    # seq 1, A = -1 (s = -1): r = 0.1  -> s*r = -0.1 (wrong way), e = 0.3, loss = 0.09/0.4 = 0.225, grad = +1.5
    #                         r = -0.1 -> s*r = 0.1, e = 0.1, loss = 0.01/0.4 = 0.025, grad = +0.5
    #                         r = -0.25 -> s*r = 0.25 >= 0.2: e = 0, loss 0, grad 0 (overshoot)
    x = inputs([[0.0, 0.1, 0.3], [0.1, -0.1, -0.25]], [[2.0], [-1.0]])
    loss, m = OutputReset(OutputReset.Config())(x)
    close(loss, [[0.2, 0.05, 0.0], [0.225, 0.025, 0.0]])
    loss.sum().backward()
    close(x.logps.grad, [[-2.0, -1.0, 0.0], [1.5, 0.5, 0.0]])
    assert m["or/residual_mean"] == pytest.approx((0.2 + 0.1 + 0 + 0.3 + 0.1 + 0) / 6)
    assert m["or/overshoot_frac"] == pytest.approx(2 / 6)
    assert m["or/log_ratio_displacement"] == pytest.approx((0 + 0.1 + 0.3 - 0.1 + 0.1 + 0.25) / 6)
    assert m["or/log_ratio_abs_mean"] == pytest.approx((0 + 0.1 + 0.3 + 0.1 + 0.1 + 0.25) / 6)


def test_gradient_is_the_policy_gradient_on_policy_and_vanishes_continuously_at_the_margin():
    # At r = 0 OR's gradient is -A, exactly the clipped surrogate's at ratio 1.
    x_or, x_clip = (inputs([[0.0, 0.0], [0.0, 0.0]], [[1.5], [-0.5]]) for _ in range(2))
    OutputReset(OutputReset.Config())(x_or)[0].sum().backward()
    Clip(Clip.Config())(x_clip)[0].sum().backward()
    close(x_or.logps.grad, x_clip.logps.grad)
    # Just below the margin the gradient is small (-A * 0.001 / 0.2), not a jump as in the clip.
    x = inputs([[0.199, 0.201, 0.25]], [[2.0]])
    loss, m = OutputReset(OutputReset.Config())(x)
    loss.sum().backward()
    close(x.logps.grad, [[-2.0 * 0.001 / 0.2, 0.0, 0.0]])
    assert m["or/overshoot_frac"] == pytest.approx(2 / 3)


def test_zero_advantage_and_masked_tokens():
    # seq 0, A = 0: no direction -> loss 0 and gradient 0 whatever r; left out of the or/* means.
    # seq 1, A = +1: r = 0.05 -> e = 0.15, loss = 0.0225/0.4 = 0.05625, grad = -0.75;
    #                r = -0.1 (masked) -> e = 0.3, loss = 0.09/0.4 = 0.225 (the aggregation masks it), no metric.
    x = inputs([[0.5, -0.5], [0.05, -0.1]], [[0.0], [1.0]], mask=[[1.0, 1.0], [1.0, 0.0]])
    loss, m = OutputReset(OutputReset.Config())(x)
    close(loss, [[0.0, 0.0], [0.05625, 0.225]])
    loss.sum().backward()
    close(x.logps.grad, [[0.0, 0.0], [-0.75, -1.5]])
    assert m["or/residual_mean"] == pytest.approx(0.15)
    assert m["or/overshoot_frac"] == 0.0
    assert m["or/log_ratio_displacement"] == pytest.approx(0.05)
    assert m["or/log_ratio_abs_mean"] == pytest.approx((0.5 + 0.5 + 0.05) / 3)  # every masked-in token
    # a batch without any directed token logs zeros, not NaN
    none = or_diagnostics(torch.ones(2, 3), torch.zeros(2, 1), torch.ones(2, 3), 0.2, 0.2)
    assert none["or/residual_mean"] == 0.0 and none["or/overshoot_frac"] == 0.0
    assert none["or/log_ratio_abs_mean"] == 1.0


def test_per_token_advantages_asymmetric_margins_and_unnormalized():
    # margin_high = 0.1, margin_low = 0.3, normalize=false: loss = |A| e^2 / 2, grad = -A e.
    # A = +1, r = 0.05 -> e = 0.05, loss = 0.00125, grad = -0.05;  A = +1, r = 0.15 -> past 0.1: 0, 0
    # A = -2, r = -0.2 -> s*r = 0.2 < 0.3: e = 0.1, loss = 2*0.01/2 = 0.01, grad = +0.2 (past 0.2 by default)
    # A = -2, r = 0    -> e = 0.3, loss = 2*0.09/2 = 0.09, grad = +0.6
    cfg = OutputReset.Config(margin_high=0.1, margin_low=0.3, normalize=False)
    x = inputs([[0.05, 0.15, -0.2, 0.0]], [[1.0, 1.0, -2.0, -2.0]])
    loss, m = OutputReset(cfg)(x)
    close(loss, [[0.00125, 0.0, 0.01, 0.09]])
    loss.sum().backward()
    close(x.logps.grad, [[-0.05, 0.0, 0.2, 0.6]])
    assert m["or/overshoot_frac"] == pytest.approx(0.25)
    assert m["or/residual_mean"] == pytest.approx((0.05 + 0 + 0.1 + 0.3) / 4)
    # 1-D advantages [B] broadcast like [B, 1]
    flat = inputs([[0.0, 0.3]], [2.0])
    close(OutputReset(OutputReset.Config())(flat)[0], [[0.2, 0.0]])


@pytest.mark.parametrize("bad", ["margin_high=0", "margin_low=-0.1"])
def test_margins_must_be_positive(bad):
    with pytest.raises(ValueError, match="must be > 0"):
        OutputReset.Config(**{bad.split("=")[0]: float(bad.split("=")[1])})
    with pytest.raises(ConfigError):
        build_run(compose(["algorithm=grpo_or", f"algorithm.loss.{bad}"]))


def test_bundle_swap_and_recipe_compose(monkeypatch, tmp_path, capsys):
    run = build_run(compose(["algorithm=grpo_or"]))
    assert run.algorithm.name == "grpo_or" and isinstance(run.algorithm.loss, OutputReset)
    assert type(run.algorithm.advantage).__name__ == "GroupNorm"
    grpo = build_run(compose(["algorithm=grpo"]))
    assert run.algorithm.aggregation == grpo.algorithm.aggregation and run.algorithm.kl == grpo.algorithm.kl
    # a loss swap on another bundle replaces the whole loss node (no stale clip keys)
    for bundle in ("grpo", "gepo"):
        cfg = compose([f"algorithm={bundle}", "algorithm/loss=output_reset", "algorithm.loss.margin_high=0.3"])
        assert set(cfg.algorithm.loss) == {"name", "margin_high", "margin_low", "normalize"}
        swapped = build_run(cfg)
        assert swapped.algorithm.name == bundle and swapped.algorithm.loss.cfg.margin_high == 0.3
    recipe = build_run(compose(["recipe=grpo_or"]))
    assert isinstance(recipe.algorithm.loss, OutputReset) and recipe.settings.train.num_iterations == 2
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["show", "recipe=grpo_or"]) == 0
    out = capsys.readouterr().out
    assert "Algorithm grpo_or" in out and "relu(m - sign(A)*r)^2 / (2m)" in out


def test_three_real_steps_log_finite_or_diagnostics(tmp_path):
    # num_iterations=2: step 1 is on the rollout policy (r = 0: residual = m, no overshoot), step 2 reuses
    # the batch after one update (lr 1e-3), so tokens have moved and some have crossed the margin.
    run = make_run(["algorithm=grpo_or", "train.num_iterations=2", "train.steps=3"])
    trainer = train_rlpost(run, tmp_path)
    logs = step_logs(trainer)
    assert len(logs) == 3
    for log in logs:
        assert all(key in log and math.isfinite(log[key]) for key in METRICS), log
        assert math.isfinite(log["loss"])
    first, second = logs[0], logs[1]
    assert first["or/residual_mean"] == pytest.approx(0.2, abs=1e-3) and first["or/overshoot_frac"] == 0.0
    assert first["or/log_ratio_abs_mean"] < 1e-3
    # at r = 0 every token has loss |A| * m / 2 (equal lengths here: the seq-mean is the |A| mean)
    assert first["loss"] == pytest.approx(0.1 * first["rlpost/advantage/abs_mean"], rel=1e-3)
    assert second["or/log_ratio_abs_mean"] > 1e-3
    assert second["or/log_ratio_displacement"] > 0  # the update moved tokens the way their advantage asks
    assert second["or/residual_mean"] < 0.2 and second["or/overshoot_frac"] > 0
