"""Entropy control with TRL 1.16's semantics, on hand-worked numbers: the entropy bonus reduced with the policy
loss or as TRL's own token mean, the adaptive coefficient (gate, +-delta, clamps, the step-global window,
checkpoint state), and top_entropy's token selection (TRL's quantile with linear interpolation)."""

import math

import pytest
import torch

from rlpost.losses.base import LossContext, LossInputs
from rlpost.regularizers.base import REGULARIZERS
from rlpost.regularizers.entropy import Entropy, adaptive_update
from rlpost.regularizers.top_entropy import TopEntropy, high_entropy_mask
from rlpost.runs.state import load_component_state, save_component_state

H = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
M = torch.tensor([[1.0, 1.0], [1.0, 0.0]])


def inputs(entropies, mask, policy_mask=None, **context):
    entropies = torch.as_tensor(entropies, dtype=torch.float64)
    mask = torch.as_tensor(mask, dtype=torch.float64)
    return LossInputs(
        logps=torch.zeros_like(entropies),
        old_logps=torch.zeros_like(entropies),
        advantages=torch.ones(entropies.size(0), 1, dtype=torch.float64),
        mask=mask,
        entropies=entropies,
        policy_mask=None if policy_mask is None else torch.as_tensor(policy_mask, dtype=torch.float64),
        context=LossContext(**context),
    )


def entropy(**cfg):
    return Entropy(Entropy.Config(**cfg))


def test_registered():
    assert REGULARIZERS.get("entropy") is Entropy and REGULARIZERS.get("top_entropy") is TopEntropy


# ---------------------------------------------------------------- the bonus, both reductions
def test_policy_reduction_is_per_token_and_keeps_the_old_behaviour():
    term, metrics = entropy(coef=0.1)(inputs(H, M))
    torch.testing.assert_close(term, -0.1 * H.double())  # -coef * H per token, aggregated with the policy loss
    assert metrics == pytest.approx({"bonus": 0.1 * 2.0, "coef": 0.1})  # 0.1 * (1 + 2 + 3) / 3


def test_token_mean_reduction_is_trls_micro_batch_token_mean():
    # TRL 1.16: bonus = sum(H*m) / max(sum(m), 1) / grad_accum = (1 + 2 + 3) / 3 / 2 = 1; term = -coef * 1
    term, _ = entropy(coef=0.1, reduce="token_mean")(inputs(H, M, grad_accum=2))
    assert term.dim() == 0 and float(term) == pytest.approx(-0.1)
    # a per-sequence mean would give mean(1.5, 3) / 2 = 1.125; a sum would give 6 / 2 = 3: both wrong
    assert float(term) != pytest.approx(-0.1125) and float(term) != pytest.approx(-0.3)


def test_the_bonus_acts_on_the_tokens_the_policy_loss_trains():
    keep = [[0.0, 1.0], [1.0, 0.0]]  # top_entropy kept H = 2 and 3
    term, metrics = entropy(coef=0.1, reduce="token_mean")(inputs(H, M, keep, grad_accum=2))
    assert float(term) == pytest.approx(-0.1 * (2 + 3) / 2 / 2)  # token mean over the kept tokens only
    assert metrics["bonus"] == pytest.approx(0.1 * 2.5)
    term, _ = entropy(coef=0.1)(inputs(H, M, keep))
    torch.testing.assert_close(term, torch.tensor([[0.0, -0.2], [-0.3, 0.0]], dtype=torch.float64))


# ---------------------------------------------------------------- the adaptive coefficient
def test_adaptive_update_rule():
    # c + delta capped at the max when entropy <= target (equality included), c - delta floored at the min otherwise
    assert adaptive_update(0.05, 2.5, 2.5, 0.04, 0.02, 0.12) == pytest.approx(0.09)
    assert adaptive_update(0.09, 1.0, 2.5, 0.04, 0.02, 0.12) == pytest.approx(0.12)  # 0.13 -> capped
    assert adaptive_update(0.12, 3.0, 2.5, 0.04, 0.02, 0.12) == pytest.approx(0.08)
    assert adaptive_update(0.04, 3.0, 2.5, 0.04, 0.02, 0.12) == pytest.approx(0.02)  # 0.0 -> floored


ADAPTIVE = dict(
    coef=0.05, reduce="token_mean", adaptive=True, target=2.5, coef_delta=0.04, coef_min=0.02, coef_max=0.12
)


def step(reg, micro_batches):
    """One optimizer step of len(micro_batches) micro-batches -> the coefficient each one applied."""
    applied = []
    for i, (h, m) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        _, metrics = reg(inputs(h, m, training=True, grad_accum=len(micro_batches), step_end=last))
        applied.append(metrics["coef"])
    return applied


def test_adaptive_schedule_hand_worked_over_five_steps():
    reg = entropy(**ADAPTIVE)
    # step 1: the gate is closed (no entropy seen yet: H_prev = inf). Window: micro-batch 1 has H*m sum 6 over
    # 3 tokens, micro-batch 2 sum 4 over 1 token -> 10 / 4 = 2.5 <= 2.5 -> c = 0.05 + 0.04 = 0.09. (The mean of
    # the micro-batch means, (2 + 4) / 2 = 3, or the last micro-batch alone, 4, would lower c: a wrong window.)
    assert step(reg, [(H, M), ([[4.0, 9.0]], [[1.0, 0.0]])]) == [0.0, 0.0]
    assert (reg.coef, reg.last_entropy) == (pytest.approx(0.09), 2.5)
    # step 2: H_prev = 2.5 <= 2.5 -> applies 0.09 in both micro-batches; H = 1 -> 0.13 capped at 0.12
    assert step(reg, [([[1.0]], [[1.0]]), ([[1.0]], [[1.0]])]) == pytest.approx([0.09, 0.09])
    assert reg.coef == pytest.approx(0.12)
    # step 3: applies 0.12; H = 3 > 2.5 -> 0.08
    assert step(reg, [([[3.0]], [[1.0]])]) == pytest.approx([0.12])
    assert reg.coef == pytest.approx(0.08)
    # step 4: H_prev = 3 > 2.5 -> gate closed (applies 0); H = 3 -> 0.04; step 5: 0.0 floored at 0.02
    assert step(reg, [([[3.0]], [[1.0]])]) == [0.0]
    assert step(reg, [([[3.0]], [[1.0]])]) == [0.0]
    assert reg.coef == pytest.approx(0.02)


def test_adaptive_applies_the_coefficient_to_the_bonus_and_eval_moves_nothing():
    reg = entropy(**ADAPTIVE)
    reg.coef, reg.last_entropy = 0.1, 1.0  # gate open
    term, _ = reg(inputs(H, M, training=False))  # eval: one micro-batch, no accumulation
    assert float(term) == pytest.approx(-0.1 * 2.0)
    assert (reg.coef, reg.last_entropy, reg.window) == (0.1, 1.0, None)  # evaluation never moves the controller


def test_adaptive_window_is_summed_over_processes():
    reg = entropy(**ADAPTIVE)
    # another process contributed H*m sum 30 over 2 tokens: (6 + 30) / (3 + 2) = 7.2 > 2.5 -> c = 0.05 - 0.04 -> 0.02
    other = torch.tensor([30.0, 2.0])
    reg(inputs(H, M, training=True, all_sum=lambda t: t + other.to(t)))
    assert reg.last_entropy == pytest.approx(7.2) and reg.coef == pytest.approx(0.02)


def test_adaptive_state_survives_a_checkpoint(tmp_path):
    reg = entropy(**ADAPTIVE)
    step(reg, [(H, M), ([[4.0, 9.0]], [[1.0, 0.0]])])
    save_component_state([("algorithm.regularizers.entropy", reg)], tmp_path)
    fresh = entropy(**ADAPTIVE)
    assert (fresh.coef, fresh.last_entropy) == (0.05, math.inf)
    assert load_component_state([("algorithm.regularizers.entropy", fresh)], tmp_path) == [
        "algorithm.regularizers.entropy"
    ]
    assert (fresh.coef, fresh.last_entropy) == (pytest.approx(0.09), 2.5)
    assert step(fresh, [([[1.0]], [[1.0]])]) == pytest.approx([0.09])  # the resumed run applies the saved coefficient


def test_constant_coefficient_keeps_no_state():
    reg = entropy(coef=0.3)
    assert reg.state_dict() == {}
    reg.load_state_dict({"coef": 9.0, "last_entropy": 0.0})  # a stale state from an adaptive run is not applied
    assert reg.applied_coef() == 0.3


def test_config_checks_and_describe():
    with pytest.raises(ValueError, match="reduce"):
        Entropy.Config(reduce="sum")
    with pytest.raises(ValueError, match="coef_min"):
        Entropy.Config(coef_min=0.5, coef_max=0.1)
    assert entropy().describe().startswith("-0.001 * H")
    assert "TRL" in entropy(reduce="token_mean").describe()
    assert "toward entropy 2.5" in entropy(**ADAPTIVE).describe()


# ---------------------------------------------------------------- top_entropy: the token selection
E = [[0.5, 3.0, 1.0, 9.0], [2.0, 4.0, 7.0, 7.0]]
EM = [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]  # counted entropies: 0.5, 3, 1, 2, 4 (9 and 7 are padding)


def select(quantile, **context):
    return TopEntropy(TopEntropy.Config(quantile=quantile)).policy_mask(inputs(E, EM, **context))


def test_top_entropy_quantile_hand_worked():
    # sorted counted entropies [0.5, 1, 2, 3, 4]; tau = quantile(1 - rho), linear interpolation at (1 - rho) * (5 - 1)
    # rho = 0.5: position 2 -> tau = 2 -> keep H >= 2 (2, 3, 4); padding never kept even with H = 9
    torch.testing.assert_close(select(0.5), torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]).double())
    # rho = 0.3: position 2.8 -> tau = 2 + 0.8 * (3 - 2) = 2.8 -> keep 3 and 4 (a nearest-rank quantile would keep 2 too)
    torch.testing.assert_close(select(0.3), torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]).double())
    # rho = 0.2: position 3.2 -> tau = 3.2 -> keep only 4; rho = 0 -> tau = max = 4 -> the same
    only_max = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]).double()
    torch.testing.assert_close(select(0.2), only_max)
    torch.testing.assert_close(select(0.0), only_max)
    assert select(1.0) is None  # rho = 1 keeps every token: no selection at all


def test_top_entropy_quantile_is_over_every_process():
    # another process's counted entropies 10, 11, 12: sorted [0.5, 1, 2, 3, 4, 10, 11, 12], rho = 0.5 -> position 3.5
    # -> tau = 3.5 -> only 4 is kept here (this process alone would keep 2, 3, 4)
    other = torch.tensor([10.0, 11.0, 12.0])
    keep = select(0.5, gather=lambda v: torch.cat([v, other.to(v)]))
    torch.testing.assert_close(keep, torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]).double())


def test_top_entropy_without_counted_tokens_trains_nothing_and_logs_its_selection():
    keep, tau = high_entropy_mask(torch.ones(1, 2), torch.zeros(1, 2), torch.zeros(0), 0.2)
    assert keep.sum() == 0 and math.isnan(tau)
    reg = TopEntropy(TopEntropy.Config(quantile=0.5))
    x = inputs(E, EM)
    x.policy_mask = reg.policy_mask(x)
    term, metrics = reg(x)
    assert term.dim() == 0 and float(term) == 0.0  # it only selects: no loss term of its own
    assert metrics == pytest.approx({"kept_frac": 3 / 5, "threshold": 2.0})
    with pytest.raises(ValueError):
        TopEntropy.Config(quantile=1.5)
    assert "top 0.2" in TopEntropy(TopEntropy.Config()).describe()
