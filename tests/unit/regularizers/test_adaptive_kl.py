"""The adaptive KL controller (Ziegler et al. 2019, verl's AdaptiveKLController) on hand-worked numbers:
the per-token term, the proportional update once per optimizer step over the step's completions, the
clip, evaluation, the checkpointed beta, and the config checks."""

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.losses.base import LossContext, LossInputs
from rlpost.regularizers.adaptive_kl import AdaptiveKL, kl_controller_update
from rlpost.regularizers.base import REGULARIZERS
from rlpost.runs.state import load_component_state, save_component_state


def inputs(log_ratio, mask, **context):
    """LossInputs whose k1 estimate log pi - log ref is exactly ``log_ratio`` [B, T]."""
    d = torch.as_tensor(log_ratio, dtype=torch.float64)
    logps = torch.full_like(d, -1.0) + d
    return LossInputs(
        logps=logps,
        old_logps=logps,
        advantages=torch.ones(d.size(0), 1, dtype=torch.float64),
        mask=torch.as_tensor(mask, dtype=torch.float64),
        ref_logps=torch.full_like(d, -1.0),
        context=LossContext(**context),
    )


def controller(**cfg):
    return AdaptiveKL(AdaptiveKL.Config(**{"estimator": "k1", **cfg}))


# one optimizer step of two micro-batches (k1 = log pi - log ref):
#   micro-batch 1: completions [0.2, 0.0] (2 tokens) and [0.1, -] (1 token) -> token means 0.1, 0.1
#   micro-batch 2: completion [0.4, 0.2] -> token mean 0.3
#   KL_step = (0.1 + 0.1 + 0.3) / 3 completions = 1/6;  n = 3
STEP = [([[0.2, 0.0], [0.1, 0.5]], [[1.0, 1.0], [1.0, 0.0]]), ([[0.4, 0.2]], [[1.0, 1.0]])]


def run_step(reg, micro_batches, **context):
    out = []
    for i, (d, m) in enumerate(micro_batches):
        out.append(reg(inputs(d, m, training=True, step_end=i == len(micro_batches) - 1, **context)))
    return out


def test_registered_and_needs_the_reference():
    assert REGULARIZERS.get("adaptive_kl") is AdaptiveKL
    assert "ref_logps" in AdaptiveKL.requires


def test_update_rule():
    # beta * (1 + clip(KL/target - 1, -clip, clip) * n / horizon)
    assert kl_controller_update(0.1, 1 / 6, 0.125, 10, 3, 1.0) == pytest.approx(0.1 * (1 + (4 / 3 - 1) * 3 / 10))
    assert kl_controller_update(0.1, 1.0, 0.1, 10, 3, 0.2) == pytest.approx(0.1 * 1.06)  # error 9 clipped to +0.2
    assert kl_controller_update(0.1, 0.0, 0.1, 10, 3, 0.2) == pytest.approx(0.1 * 0.94)  # error -1 clipped to -0.2
    assert kl_controller_update(0.1, 0.1, 0.1, 10, 3, 0.2) == 0.1  # at the target: unchanged


def test_one_step_hand_worked():
    reg = controller(coef=0.1, target=0.125, horizon=10, clip=1.0)
    (term, metrics), _ = run_step(reg, STEP)
    # the term is beta * k1 per token with the step's starting beta, for every micro-batch of the step
    torch.testing.assert_close(term, 0.1 * torch.tensor([[0.2, 0.0], [0.1, 0.5]], dtype=torch.float64))
    assert metrics == pytest.approx({"kl": 0.1, "coef": 0.1})  # masked token mean (0.2 + 0 + 0.1) / 3
    # e = (1/6) / 0.125 - 1 = 1/3; beta = 0.1 * (1 + 1/3 * 3 / 10) = 0.11. A token-weighted KL (0.9 / 5 = 0.18)
    # or n = tokens (5) would give 0.1132 or 0.1167; the last micro-batch alone (0.3, n = 1) 0.1467
    assert reg.coef == pytest.approx(0.11)
    # step 2: the policy is at the reference (KL 0): e = -1 -> beta = 0.11 * (1 - 1 * 1 / 10) = 0.099
    ((term, metrics),) = run_step(reg, [([[0.0, 0.0]], [[1.0, 1.0]])])
    assert metrics["coef"] == pytest.approx(0.11) and reg.coef == pytest.approx(0.099)


def test_clip_and_processes():
    reg = controller(coef=0.1, target=0.01, horizon=10, clip=0.2)
    run_step(reg, STEP)
    assert reg.coef == pytest.approx(0.1 * (1 + 0.2 * 3 / 10))  # KL 1/6 >> 0.01: the error is clipped at 0.2
    # another process adds 5 completions with KL-mean sum 0: KL = 0.5 / 8, n = 8, target 0.125 -> e = -0.5
    reg = controller(coef=0.1, target=0.125, horizon=10, clip=1.0)
    other = torch.tensor([0.0, 5.0])
    run_step(reg, STEP, all_sum=lambda t: t + other.to(t))
    assert reg.coef == pytest.approx(0.1 * (1 - 0.5 * 8 / 10))


def test_evaluation_and_empty_steps_leave_beta_alone():
    reg = controller(coef=0.1, target=0.125, horizon=10, clip=1.0)
    reg(inputs([[0.4, 0.2]], [[1.0, 1.0]], training=False))
    assert reg.coef == 0.1 and reg.window is None
    run_step(reg, [([[0.4, 0.2]], [[0.0, 0.0]])])  # no counted token in the step: no measurement, no update
    assert reg.coef == 0.1


def test_beta_survives_a_checkpoint(tmp_path):
    reg = controller(coef=0.1, target=0.125, horizon=10, clip=1.0)
    run_step(reg, STEP)
    save_component_state([("algorithm.regularizers.adaptive_kl", reg)], tmp_path)
    fresh = controller(coef=0.1, target=0.125, horizon=10, clip=1.0)
    load_component_state([("algorithm.regularizers.adaptive_kl", fresh)], tmp_path)
    assert fresh.coef == pytest.approx(0.11)
    ((_, metrics),) = run_step(fresh, [([[0.0, 0.0]], [[1.0, 1.0]])])
    assert metrics["coef"] == pytest.approx(0.11)


def test_k3_term_and_config_checks():
    reg = AdaptiveKL(AdaptiveKL.Config(coef=0.5))
    term, _ = reg(inputs([[0.5]], [[1.0]]))
    assert float(term) == pytest.approx(0.5 * (torch.exp(torch.tensor(-0.5)) + 0.5 - 1).item())  # TRL's k3
    for bad in ({"target": 0.0}, {"horizon": -1.0}, {"coef": 0.0}, {"clip": 0.0}, {"estimator": "k4"}):
        with pytest.raises(ValueError):
            AdaptiveKL.Config(**bad)
    assert "beta *= 1 + clip(KL/0.1 - 1, +-0.2) * n/10000" in reg.describe()


def test_build_loads_the_reference_and_refuses_a_second_kl_in_the_loss():
    run = build_run(compose(["model=tiny-random", "algorithm/regularizers=[adaptive_kl]"]))
    assert run.needs_reference and [name for name, _ in run.algorithm.regularizers] == ["adaptive_kl"]
    with pytest.raises(ConfigError, match="algorithm.kl.coef=0"):
        build_run(compose(["model=tiny-random", "algorithm/regularizers=[adaptive_kl]", "algorithm.kl.coef=0.1"]))
