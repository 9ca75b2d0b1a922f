"""SAPO (arXiv 2511.20347, TRL loss_type="sapo"): hand-computed loss, gradient, metric and `rlpost show`.

Per token, with r = pi/pi_old, tau = temperature_pos where A > 0 else temperature_neg::

    s = sigmoid(tau * (r - 1)),   loss = -(4 s / tau) * A,   d loss / d log pi = -A * r * 4 s (1 - s)

Ratios are chosen so that s is 1/2 (r = 1) or 3/4, 1/4 (tau * (r - 1) = +-ln 3).
"""

import math

import pytest
import torch

from rlpost import cli
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.losses.base import LOSSES, LossInputs
from rlpost.losses.sapo import SAPO

LN3 = math.log(3.0)


def close(a, b):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), rtol=1e-9, atol=1e-12)


def inputs(ratios, advantages):
    """LossInputs whose token ratios pi/pi_old are exactly ``ratios`` (old log-probs -1)."""
    r = torch.tensor(ratios, dtype=torch.float64)
    old_logps = torch.full_like(r, -1.0)
    logps = (old_logps + r.log()).requires_grad_(True)
    return LossInputs(logps=logps, old_logps=old_logps, advantages=torch.tensor(advantages, dtype=torch.float64),
                      mask=torch.ones_like(r))  # fmt: skip


def test_registered_with_trl_defaults():
    assert LOSSES.get("sapo") is SAPO
    cfg = SAPO.Config()
    assert (cfg.temperature_pos, cfg.temperature_neg) == (1.0, 1.05)  # TRL sapo_temperature_pos / _neg


def test_hand_computed_gate_loss_and_gradient():
    # tau_pos = 1, tau_neg = 2
    # seq 0, A = +2, tau = 1:  r = 1        -> s = 1/2, loss = -(4 * 1/2 / 1) * 2 = -4, grad = -2 * 1 * 4 * 1/4 = -2
    #                          r = 1 + ln 3 -> s = 3/4, loss = -(3 / 1) * 2 = -6,       grad = -2 * r * 4 * 3/16 = -1.5 r
    # seq 1, A = -1, tau = 2:  r = 1        -> s = 1/2, loss = (4 * 1/2 / 2) = 1,       grad = +1
    #                          r = 1 - ln3/2 -> s = 1/4, loss = (4 * 1/4 / 2) = 0.5,    grad = r * 4 * 3/16 = 0.75 r
    r_up, r_down = 1 + LN3, 1 - LN3 / 2
    x = inputs([[1.0, r_up], [1.0, r_down]], [2.0, -1.0])
    loss, metrics = SAPO(SAPO.Config(temperature_pos=1.0, temperature_neg=2.0))(x)
    close(loss, [[-4.0, -6.0], [1.0, 0.5]])
    loss.sum().backward()
    close(x.logps.grad, [[-2.0, -1.5 * r_up], [1.0, 0.75 * r_down]])
    # gate attenuation 4 s (1 - s): 1, 3/4, 1, 3/4
    assert metrics["sapo/gate_mean"] == pytest.approx(0.875)


def test_negative_advantages_and_zero_take_the_negative_temperature():
    # defaults: A = -1 at r = 1 -> loss = 4 * 1/2 / 1.05 = 1.904762 (with tau_pos = 1 it would be 2)
    loss, _ = SAPO(SAPO.Config())(inputs([[1.0], [1.0]], [-1.0, 0.0]))
    close(loss, [[2 / 1.05], [0.0]])
    # on-policy the gradient is the policy gradient -A whatever tau (4 s (1 - s) = 1 at r = 1)
    x = inputs([[1.0, 1.0]], [[3.0]])
    SAPO(SAPO.Config(temperature_pos=7.0))(x)[0].sum().backward()
    close(x.logps.grad, [[-3.0, -3.0]])


def test_temperatures_must_be_positive():
    with pytest.raises(ConfigError, match="algorithm.loss: temperature_pos and temperature_neg must be > 0"):
        build_config(SAPO.Config, {"temperature_neg": 0.0}, "algorithm.loss")
    with pytest.raises(ValueError, match="must be > 0"):
        SAPO.Config(temperature_pos=-1.0)


@pytest.mark.parametrize("choice", ["algorithm/loss=sapo", "algorithm=sapo"])
def test_show_states_the_formula(choice, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["show", choice]) == 0
    out = capsys.readouterr().out
    assert "-s*4/tau * A, s = sigmoid(tau*(r-1))" in out and "tau = 1 (A>0) / 1.05 (A<=0)" in out
    assert "seq-mean-token-mean" in out  # TRL aggregates sapo as grpo
