"""VESPO (arXiv 2602.10693, TRL loss_type="vespo"): hand-computed kernel, loss, gradient, IS folding, show.

With w the sequence IS weight, the product of the counted tokens' ratios (log w = sum_t m * log r_t)::

    phi(w) = w^k * exp(lambda * (1 - w)),  (k, lambda) = (2, 3) where A >= 0, (3, 2) where A < 0 (TRL's defaults)
    loss   = -sg(phi) * A * log pi,       d loss / d log pi = -phi * A
"""

import math

import pytest
import torch
from trl import GRPOTrainer

from rlpost import cli
from rlpost.losses.base import LOSSES, LossInputs
from rlpost.losses.vespo import VESPO, gamma_weight

LN2 = math.log(2.0)


def close(a, b, rtol=1e-9):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), rtol=rtol, atol=1e-12)


def inputs(log_ratios, advantages, mask=None, batch=None):
    """LossInputs whose token log-ratios are exactly ``log_ratios`` (old log-probs -1)."""
    d = torch.tensor(log_ratios, dtype=torch.float64)
    old_logps = torch.full_like(d, -1.0)
    m = torch.ones_like(d) if mask is None else torch.tensor(mask, dtype=torch.float64)
    adv = torch.tensor(advantages, dtype=torch.float64)
    return LossInputs(logps=(old_logps + d).requires_grad_(True), old_logps=old_logps, advantages=adv, mask=m,
                      batch=batch or {})  # fmt: skip


def test_registered_with_trl_defaults():
    assert LOSSES.get("vespo") is VESPO and VESPO.folds_importance_ratio
    cfg = VESPO.Config()
    assert (cfg.k_pos, cfg.lambda_pos, cfg.k_neg, cfg.lambda_neg) == (2.0, 3.0, 3.0, 2.0)


def test_hand_computed_kernel_loss_and_gradient():
    # seq 0, A = +1, (k, lambda) = (2, 3): log-ratios [ln 2, 0] -> w = 2 * 1 = 2 (the product; the mean would be
    #   sqrt 2): phi = 2^2 * e^(3 * (1 - 2)) = 4 e^-3 = 0.1991483
    #   log pi = [-1 + ln 2, -1]: loss = -phi * 1 * log pi = [0.0611092, 0.1991483]; grad = -phi = -0.1991483
    # seq 1, A = -2, (k, lambda) = (3, 2): log-ratios [-ln 2, 5 (not counted)] -> w = 1/2:
    #   phi = (1/2)^3 * e^(2 * (1 - 1/2)) = e / 8 = 0.3397852
    #   log pi = [-1 - ln 2, 4]: loss = 2 phi log pi = [-1.1506128, 2.7182818]; grad = -phi * A = 2 phi = 0.6795705
    phi0, phi1 = 4 * math.exp(-3), math.e / 8
    x = inputs([[LN2, 0.0], [-LN2, 5.0]], [1.0, -2.0], mask=[[1, 1], [1, 0]])
    loss, metrics = VESPO(VESPO.Config())(x)
    close(loss, [[-phi0 * (-1 + LN2), phi0], [2 * phi1 * (-1 - LN2), 2 * phi1 * 4.0]])
    close(loss, [[0.0611092, 0.1991483], [-1.1506128, 2.7182818]], rtol=1e-6)
    loss.sum().backward()  # phi is detached: the gradient is -phi * A on every token (the mask acts in aggregation)
    close(x.logps.grad, [[-phi0, -phi0], [2 * phi1, 2 * phi1]])
    assert metrics["vespo/phi_seq_mean"] == pytest.approx((phi0 + phi1) / 2)


def test_on_policy_is_the_policy_gradient_and_zero_advantage_takes_the_positive_pair():
    # w = 1: phi(1) = 1 for any (k, lambda), so d loss / d log pi = -A = +3
    x = inputs([[0.0, 0.0]], [[-3.0]])
    VESPO(VESPO.Config(k_neg=5.0, lambda_neg=0.5))(x)[0].sum().backward()
    close(x.logps.grad, [[3.0, 3.0]])
    # A = 0 at w = 2: phi from (k_pos, lambda_pos) = (2, 3) -> 4 e^-3 (the negative pair would give 8 e^-2)
    _, metrics = VESPO(VESPO.Config())(inputs([[LN2]], [0.0]))
    assert metrics["vespo/phi_seq_mean"] == pytest.approx(4 * math.exp(-3))


def test_the_batch_importance_ratio_is_folded_into_w():
    # no policy change (log-ratios 0) but rho = [2, 1]: w = 2 * 1 = 2 -> phi = 4 e^-3 for A > 0
    rho = torch.tensor([[2.0, 1.0]], dtype=torch.float64)
    _, metrics = VESPO(VESPO.Config())(inputs([[0.0, 0.0]], [1.0], batch={"importance_sampling_ratio": rho}))
    assert metrics["vespo/phi_seq_mean"] == pytest.approx(4 * math.exp(-3))


def test_clamps_keep_phi_finite():
    # a huge w: log w clamped to 20, phi = exp(3 + 2 * 20 - 3 e^20) = 0; a tiny w: log w -> log 1e-8
    phi = gamma_weight(torch.tensor([[30.0, 30.0], [-40.0, 0.0]]), torch.ones(2, 2), torch.ones(2, 1),
                       VESPO.Config(), None)  # fmt: skip
    assert phi[0, 0] == 0.0 and phi[1, 0] == pytest.approx(math.exp(3 - 3e-8) * 1e-16, rel=1e-4)


def test_matches_trls_gamma_weights():
    torch.manual_seed(0)
    log_ratio, mask = torch.randn(6, 5) * 0.3, (torch.rand(6, 5) > 0.2).float()
    adv, rho = torch.randn(6, 1), torch.rand(6, 5) + 0.5
    cfg = VESPO.Config(k_pos=1.5, lambda_pos=2.5, k_neg=2.0, lambda_neg=1.0)
    for is_ratio in (None, rho):
        trl = GRPOTrainer.get_gamma_weights(adv, log_ratio, mask, is_ratio, 1.5, 2.5, 2.0, 1.0)
        torch.testing.assert_close(gamma_weight(log_ratio, mask, adv, cfg, is_ratio), trl, rtol=0, atol=0)


@pytest.mark.parametrize("choice", ["algorithm/loss=vespo", "algorithm=vespo"])
def test_show_states_the_formula(choice, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["show", choice]) == 0
    out = capsys.readouterr().out
    assert "-sg(phi(w))*A*log pi, phi(w) = w^k*exp(lambda*(1-w)), w = prod_t pi/pi_old per sequence" in out
    assert "(k, lambda) = (2, 3) for A>=0, (3, 2) for A<0" in out
    if choice == "algorithm=vespo":
        assert "token-mean" in out  # TRL aggregates vespo as dapo
