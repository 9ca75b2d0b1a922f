"""GMPO (arXiv 2507.20673, TRL trl.experimental.gmpo): hand-computed loss, gradient, clip metrics, show.

Per sequence, with d_t the token log-ratios and eps = 0.4 in log space (the defaults)::

    d'_t = min(d_t, clamp(d_t, -0.4, 0.4)) if A > 0 else max(d_t, clamp(d_t, -0.4, 0.4))
    loss = -exp(sum_t d'_t m_t / |o|) * A        (the geometric mean of the clipped token ratios)
"""

import math

import pytest
import torch

from rlpost import cli
from rlpost.losses.base import LOSSES, LossInputs
from rlpost.losses.gmpo import GMPO


def close(a, b):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), rtol=1e-9, atol=1e-12)


def inputs(log_ratios, advantages, mask):
    d = torch.tensor(log_ratios, dtype=torch.float64)
    old_logps = torch.full_like(d, -1.0)
    return LossInputs(logps=(old_logps + d).requires_grad_(True), old_logps=old_logps,
                      advantages=torch.tensor(advantages, dtype=torch.float64),
                      mask=torch.tensor(mask, dtype=torch.float64))  # fmt: skip


def test_registered_with_the_papers_log_space_range():
    assert LOSSES.get("gmpo") is GMPO
    assert (GMPO.Config().epsilon_low, GMPO.Config().epsilon_high) == (0.4, 0.4)  # TRL GMPOConfig: epsilon 0.4


def test_hand_computed_geometric_mean_with_one_sided_log_clip():
    # seq 0, A = +1, d = [0.6, -0.6, 0.3]: clamp -> [0.4, -0.4, 0.3]; A > 0 takes the min -> [0.4, -0.6, 0.3]
    #   log s = (0.4 - 0.6 + 0.3) / 3 = 1/30, s = e^(1/30) = 1.0338951, loss = -s
    #   gradient: token 0 sits on its clip (the min picked the constant 0.4): 0; tokens 1, 2: -A s / 3 = -0.3446317
    # seq 1, A = -1, d = [0.6, -0.6, 5 (masked)]: clamp -> [0.4, -0.4, 0.4]; A < 0 takes the max -> [0.6, -0.4, 5]
    #   log s = (0.6 - 0.4) / 2 = 0.1, s = e^0.1 = 1.1051709, loss = +s
    #   gradient: token 0: -A s / 2 = 0.5525855; token 1 clipped (max picked -0.4): 0; token 2 masked: 0
    # (the arithmetic mean of the ratios, GRPO's, would give (e^0.4 + e^-0.6 + e^0.3) / 3 = 1.0771 for seq 0)
    x = inputs([[0.6, -0.6, 0.3], [0.6, -0.6, 5.0]], [1.0, -1.0], [[1, 1, 1], [1, 1, 0]])
    loss, m = GMPO(GMPO.Config())(x)
    s0, s1 = math.exp(1 / 30), math.exp(0.1)
    close(loss, [[-s0], [s1]])
    loss.sum().backward()
    close(x.logps.grad, [[0.0, -s0 / 3, -s0 / 3], [s1 / 2, 0.0, 0.0]])
    # clip metrics over the 5 counted tokens: low (d < -0.4, A < 0): seq 1 token 1; high (d > 0.4, A > 0): seq 0 token 0
    assert m["clip_ratio/low_mean"] == pytest.approx(0.2) and m["clip_ratio/high_mean"] == pytest.approx(0.2)
    assert m["clip_ratio/region_mean"] == pytest.approx(0.4)
    # per-sequence means: low [0, 1/2] -> min 0; high [1/3, 0] -> max 1/3
    assert m["clip_ratio/low_min"] == 0.0 and m["clip_ratio/high_max"] == pytest.approx(1 / 3)


def test_on_policy_gradient_is_grpos():
    # d = 0: s = 1, d loss / d log pi_t = -A / |o| per counted token, GRPO's under seq-mean-token-mean
    x = inputs([[0.0, 0.0, 0.0, 0.0]], [2.0], [[1, 1, 1, 1]])
    loss, _ = GMPO(GMPO.Config(epsilon_low=0.1, epsilon_high=0.2))(x)
    close(loss, [[-2.0]])
    loss.sum().backward()
    close(x.logps.grad, [[-0.5, -0.5, -0.5, -0.5]])


def test_negative_range_is_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        GMPO.Config(epsilon_low=-0.1)


@pytest.mark.parametrize("choice", ["algorithm/loss=gmpo", "algorithm=gmpo"])
def test_show_states_the_formula(choice, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["show", choice]) == 0
    out = capsys.readouterr().out
    assert "-exp(mean_t clip(log r_t))*A per sequence: the geometric mean of the token ratios" in out
    assert "pessimistic side of [-0.4, 0.4]" in out
