"""``ais``: adaptive importance sampling for rollout-training mismatch (seed 004 #24).

Reading of the abstract: low-precision rollouts bias the gradient; the bias is an exploration
bonus early and destabilizing later, so the correction strength is set *per batch* from three
real-time diagnostics combined into one mixing coefficient lambda that interpolates between the
uncorrected (w = 1) and the fully importance-weighted (w = pi/mu) gradient. Since the gradient is
linear in the per-token loss weight, interpolating gradients is interpolating weights:

    w_t   = min(pi(y_t) / mu(y_t), cap)                                   truncated IS weight [N, T]
    rho   = (sum_t w_t)^2 / (n * sum_t w_t^2)                             weight reliability: normalized ESS in (0, 1]
    s     = 1 - exp(-KL / kl_scale),  KL = mean_t (r_t - 1 - log r_t)     divergence severity in [0, 1), r = pi/mu
    phi   = min(1, (Var_t(A_t) + eps) / (Var_t(w_t A_t) + eps))           variance amplification (1 = none), eps = 1e-12
    lambda = s * rho * phi
    weight_t = (1 - lambda) + lambda * w_t

All statistics are over the counted tokens of the whole generation batch (all processes), A_t is
the completion's advantage at token t. Choices where the abstract is silent: the three diagnostics
are multiplied (each alone can veto the correction: unreliable weights, negligible mismatch or a
variance blow-up each pull lambda toward the uncorrected gradient); severity saturates with the
k3 KL estimate on a scale ``kl_scale`` (a config field); the weights are truncated at ``cap``
before the diagnostics (so rho and phi judge the weights actually used); eps makes phi = 1 when
both variances vanish (all advantages 0) and ~0 when only Var(A) does (IS alone adds variance).
Logged: lambda, rho, severity, phi, the KL estimate and the weight mean/min/max.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.core.schema import Range
from rlpost.corrections.base import (
    CORRECTIONS,
    Correction,
    CorrectionInputs,
    CorrectionSettings,
    masked_mean,
    weight_metrics,
)

EPS = 1e-12


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Population variance of ``x`` [N, T] over ``mask`` [N, T] (scalar)."""
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask)


def ais_coefficient(
    w: torch.Tensor, log_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, kl_scale: float
):
    """(lambda, rho, severity, phi, kl) as 0-dim tensors; w, log_ratio, mask [N, T], advantages [N, 1] or [N, T]."""
    m = mask.bool()
    wm = w[m]
    n = wm.numel()
    if n == 0:
        zero = torch.zeros((), device=w.device)
        return zero, zero + 1, zero, zero + 1, zero
    rho = wm.sum() ** 2 / (n * (wm**2).sum()).clamp(min=EPS)
    kl = masked_mean(torch.exp(log_ratio) - 1 - log_ratio, mask)
    severity = 1 - torch.exp(-kl / kl_scale)
    adv = advantages.expand_as(mask)
    var_a = masked_var(adv, mask)
    var_wa = masked_var(w * adv, mask)
    phi = ((var_a + EPS) / (var_wa + EPS)).clamp(max=1.0)
    return severity * rho * phi, rho, severity, phi, kl


@CORRECTIONS.register("ais")
class AdaptiveIS(Correction):
    """AIS: weight (1 - lambda) + lambda * min(pi/mu, cap), lambda from reliability x severity x variance per batch."""

    @dataclass(frozen=True)
    class Config(CorrectionSettings):
        cap: Annotated[float, Range(gt=0)] = 2.0
        kl_scale: Annotated[float, Range(gt=0)] = 1.0e-3

        def __post_init__(self):
            if self.cap <= 0 or self.kl_scale <= 0:
                raise ValueError(f"need cap > 0 and kl_scale > 0, got cap={self.cap}, kl_scale={self.kl_scale}")

    def __call__(self, x: CorrectionInputs) -> tuple[torch.Tensor, dict[str, float]]:
        log_ratio = x.log_ratio
        w = torch.exp(log_ratio).clamp(max=self.cfg.cap)
        lam, rho, severity, phi, kl = ais_coefficient(w, log_ratio, x.advantages, x.mask, self.cfg.kl_scale)
        weights = (1 - lam) + lam * w
        metrics = weight_metrics(weights, x.mask)
        metrics.update(
            lam=lam.item(), reliability=rho.item(), severity=severity.item(), variance_factor=phi.item(), kl=kl.item()
        )
        return weights, metrics

    def describe(self) -> str:
        return (
            f"ais: loss x ((1 - lambda) + lambda * min(pi/mu, {self.cfg.cap:g})), lambda = severity(KL, "
            f"{self.cfg.kl_scale:g}) x reliability(ESS) x variance factor, per batch"
        )
