"""``acrl``: adaptive control of the train-inference discrepancy (seed 000 #18).

Reading of the abstract (ACRL): rather than re-weighting by importance ratios, keep the
training-inference discrepancy that reaches the update *inside a band* by adaptive (feedback)
control. rlpost's controller:

    Delta_t = log pi_train(y_t) - log pi_rollout(y_t)                per token [N, T]
    g_t     = 1[|Delta_t| <= tau]                                    token gate: the loss weight [N, T]
    D_real  = sum_t m_t |Delta_t| / sum_t m_t                         the real train-inference discrepancy
    D_adm   = sum_t g_t |Delta_t| / sum_t m_t                         the part the gate admits into the update
    D       = D_real (controlled: real, the default) or D_adm (controlled: admitted)
    tau    <- max(tau * exp(-gain), tau_min)   if D > band_high       tighten
    tau    <- min(tau * exp(+gain), tau_max)   if D < band_low        relax
              unchanged                        otherwise              (dead band)

The gate of a batch uses the current tau; tau is then updated from that batch's D (feedback, so
a batch never sees a threshold computed from itself). Choices where the abstract is silent: the
discrepancy is the mean absolute per-token log-prob difference (the ``mismatch/logp_abs_diff``
rlpost logs for every run); the actuator is a token gate (tokens far off the rollout policy carry
no gradient, the others are left unweighted, unlike IS); the update is multiplicative (tau spans
orders of magnitude between bf16 and fp8 mismatch).

What the controller keeps in the band is the *real* discrepancy between the rollout engine and the
trainer, as the abstract says ("adaptively maintains the training-inference discrepancy within a
reasonable range"). The gate cannot change the engines' numbers within a batch; the loop closes
through training: while the real discrepancy is above the band the gate narrows, so the updates
no longer move the policy along the tokens where the engines disagree most, and a policy drifting
into regions the low-precision engine renders poorly is held back. ``controlled: admitted`` keeps
the earlier reading: the band holds only the
discrepancy the gate lets through, which the gate can always meet by closing, whatever the engines
do. The abstract's entropy increase is an effect to measure (``entropy`` in the logs,
bench/METHODS.md), not a term added here. The controller state (tau, updates, last D) is saved in
every checkpoint (rlpost/runs/state.py) and restored on resume. Evaluation batches do not move it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.core.schema import Range
from rlpost.corrections.base import (
    CORRECTIONS,
    Correction,
    CorrectionInputs,
    CorrectionSettings,
    fraction,
    weight_metrics,
)

logger = logging.getLogger(__name__)

# the engines' floor mismatch: mean |Delta| of bf16 rollouts against the fp32 trainer, SmolLM2-135M on CPU
# (bench/METHODS.md ACRL); a band containing it never moves tau with bf16 rollouts
BF16_FLOOR = (0.03, 0.04)


@CORRECTIONS.register("acrl")
class AdaptiveControl(Correction):
    """ACRL: a token gate |log pi - log mu| <= tau, tau adapted so the admitted discrepancy stays in a band."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)

    @dataclass(frozen=True)
    class Config(CorrectionSettings):
        # the band must lie above the engines' floor mismatch (bf16 vs fp32 SmolLM2: mean |Delta| 0.03-0.04)
        band_low: Annotated[float, Range(ge=0)] = 1.0e-2
        band_high: Annotated[float, Range(gt=0)] = 5.0e-2
        tau_init: Annotated[float, Range(gt=0)] = 0.5
        tau_min: Annotated[float, Range(gt=0)] = 1.0e-3
        tau_max: Annotated[float, Range(gt=0)] = 5.0
        gain: Annotated[float, Range(gt=0)] = 0.5
        controlled: Literal["real", "admitted"] = "real"  # the discrepancy kept in the band

        def __post_init__(self):
            if not 0 <= self.band_low < self.band_high:
                raise ValueError(f"need 0 <= band_low < band_high, got {self.band_low}, {self.band_high}")
            if not 0 < self.tau_min <= self.tau_init <= self.tau_max:
                raise ValueError(
                    f"need 0 < tau_min <= tau_init <= tau_max, got {self.tau_min}, {self.tau_init}, {self.tau_max}"
                )
            if self.gain <= 0:
                raise ValueError(f"gain={self.gain} must be > 0")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.tau = self.cfg.tau_init
        self.updates = 0
        self.last_discrepancy = float("nan")
        self._warned = False  # the saturation warning is logged once

    def __call__(self, x: CorrectionInputs) -> tuple[torch.Tensor, dict[str, float]]:
        delta = x.log_ratio.abs()  # [N, T], 0 on masked-out tokens
        tau = self.tau
        gate = (delta <= tau).float()
        tokens = x.mask.sum().clamp(min=1.0)
        admitted = ((gate * delta * x.mask).sum() / tokens).item()
        real = ((delta * x.mask).sum() / tokens).item()
        discrepancy = real if self.cfg.controlled == "real" else admitted
        metrics = weight_metrics(gate, x.mask)
        metrics.update(tau=tau, admitted_discrepancy=admitted, real_discrepancy=real)
        metrics["gated_fraction"] = fraction(gate == 0, x.mask)
        if x.training:
            self.update(discrepancy)
        metrics["in_band"] = float(self.cfg.band_low <= discrepancy <= self.cfg.band_high)
        metrics["saturated"] = float(self.saturated)
        return gate, metrics

    @property
    def saturated(self) -> bool:
        """The gate is at its tightest and the controlled discrepancy still above the band."""
        return self.tau <= self.cfg.tau_min and self.last_discrepancy > self.cfg.band_high

    def update(self, discrepancy: float) -> None:
        """One controller step from the controlled discrepancy D of the last batch."""
        c = self.cfg
        if discrepancy > c.band_high:
            self.tau = max(self.tau * math.exp(-c.gain), c.tau_min)
        elif discrepancy < c.band_low:
            self.tau = min(self.tau * math.exp(c.gain), c.tau_max)
        self.updates += 1
        self.last_discrepancy = discrepancy
        if self.saturated and not self._warned:
            self._warned = True
            logger.warning(
                "acrl: the %s train-inference discrepancy (%.4g) stays above band_high=%g with the gate at tau_min=%g: "
                "the band lies below what gating can reach (the engines' floor mismatch); raise "
                "algorithm.correction.band_low/band_high above it",
                c.controlled,
                discrepancy,
                c.band_high,
                c.tau_min,
            )

    def band_contains_floor(self) -> bool:
        """The band [band_low, band_high] holds the whole bf16 floor (``BF16_FLOOR``) and bf16 rollouts give it."""
        c = self.cfg
        return c.rollout_precision == "bf16" and c.band_low <= BF16_FLOOR[0] and BF16_FLOOR[1] <= c.band_high

    def config_warnings(self, run: Any) -> list[str]:
        warnings = []
        if self.band_contains_floor():
            c = self.cfg
            warnings.append(
                f"algorithm/correction=acrl: the band [{c.band_low:g}, {c.band_high:g}] contains the bf16 mismatch floor "
                f"(mean |log pi - log mu| {BF16_FLOOR[0]:g}-{BF16_FLOOR[1]:g}, rlpost/corrections/acrl.py): with bf16 "
                f"rollouts the discrepancy sits inside the band, tau stays at tau_init={c.tau_init:g} and the gate "
                f"admits nearly every token, so its activity figure will stay near 0. Put the band above the floor "
                f"(algorithm.correction.band_low={BF16_FLOOR[1]:g} or more) or tau_init lower."
            )
        return warnings

    def inert_reason(self, rows: list[dict[str, Any]], run: Any) -> str | None:
        """The controlled discrepancy stayed inside the band (``in_band`` = 1 every step): tau never moved."""
        in_band = [row["rlpost/correction/in_band"] for row in rows if row.get("rlpost/correction/in_band") is not None]
        if in_band and all(v == 1.0 for v in in_band):
            where = " (the band contains the bf16 floor)" if self.band_contains_floor() else ""
            return (
                f"the {self.cfg.controlled} discrepancy stayed inside the band at every step{where}, so tau stayed at "
                f"tau_init={self.cfg.tau_init:g} and the gate admitted every token"
            )
        return None

    def state_dict(self) -> dict:
        return {"tau": self.tau, "updates": self.updates, "last_discrepancy": self.last_discrepancy}

    def load_state_dict(self, state: dict) -> None:
        self.tau = float(state["tau"])
        self.updates = int(state["updates"])
        self.last_discrepancy = float(state["last_discrepancy"])

    def describe(self) -> str:
        c = self.cfg
        return (
            f"acrl: loss x 1[|log pi - log mu| <= tau], tau adapted (x exp(+-{c.gain:g})) to keep the {c.controlled} "
            f"discrepancy in [{c.band_low:g}, {c.band_high:g}] (tau in [{c.tau_min:g}, {c.tau_max:g}], starts {c.tau_init:g})"
        )
