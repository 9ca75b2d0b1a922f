"""``acrl``: adaptive control of the train-inference discrepancy (seed 000 #18).

Reading of the abstract (ACRL): rather than re-weighting by importance ratios, keep the
training-inference discrepancy that reaches the update *inside a band* by adaptive (feedback)
control, with an FP8 inference engine. rlpost's controller:

    Delta_t = log pi_train(y_t) - log pi_rollout(y_t)                per token [N, T]
    g_t     = 1[|Delta_t| <= tau]                                    token gate: the loss weight [N, T]
    D_real  = sum_t m_t |Delta_t| / sum_t m_t                         the engines' real discrepancy
    D_adm   = sum_t g_t |Delta_t| / sum_t m_t                         the part the gate admits into the update
    D       = D_adm (controlled: admitted, the default) or D_real (controlled: real)
    tau    <- max(tau * exp(-gain), tau_min)   if D > band_high       tighten
    tau    <- min(tau * exp(+gain), tau_max)   if D < band_low        relax
              unchanged                        otherwise              (dead band)

The gate of a batch uses the current tau; tau is then updated from that batch's D (feedback, so
a batch never sees a threshold computed from itself). Choices where the abstract is silent: the
discrepancy is the mean absolute per-token log-prob difference (the ``mismatch/logp_abs_diff``
rlpost logs for every run); the update is multiplicative (tau spans orders of magnitude between
bf16 and fp8 mismatch); the FP8 engine is a fake-FP8 rollout copy (``rollout_precision: fp8``,
rlpost/models/fake_fp8.py, rlpost/trainer/rollout_engine.py), the default here.

The actuator is the token gate, and what it keeps in the band is the discrepancy admitted into
the update. Why not the real discrepancy, and why not another actuator: the real D is set by the
two engines and by the policy's entropy (a sampled token near probability 1 has Delta near 0
whatever the rounding), not by which tokens a batch trains on nor by how far one update moves
the policy. The copy is re-synced before every generation, so an update changes the next D only
through the policy it leaves: bench/METHODS.md's two bf16 runs gated 47% and 17% of the tokens
and both went 0.039 -> 0.032/0.033. A step-size actuator (a learning-rate or clip scale: D above
the band -> smaller steps) has the same lack of authority, and the drift it would slow has no fixed
sign (bf16 rollouts: D fell 0.039 -> 0.032 as entropy fell 1.68 -> 1.33; fp8 rollouts: D rose
0.171 -> 0.183 as entropy fell 1.96 -> 1.70 in two steps), so it would pin its scale at the floor
while D stays where the engines put it. The one lever on the real D, the policy's entropy, would
have to be lowered, the opposite of the abstract's "ACRL inherently increases policy entropy".
What a controller can hold in a range under FP8 inference is the mismatch that the update is
computed from: the gate drops the tokens where the engines disagree
most (the low-probability, heavy-ratio tokens that IS would up- or down-weight) and closes only
as far as the band needs. ``band_low`` > 0 is what makes that a regulation rather than "close the
gate": below it the gate re-opens, so with rollouts that agree (bf16: 0.03-0.04 on SmolLM2, below
the default band) tau relaxes to ``tau_max`` and no token is dropped, and with fp8 rollouts (0.13-0.20)
tau falls until the admitted part is in [0.05, 0.10]. ``controlled: real`` keeps the other reading
for comparison; with a gate it is either inert (the band contains the engines' floor) or saturates
at ``tau_min`` (the floor is above the band), as the config warnings say.

The abstract's entropy increase is an effect to measure (``entropy`` in the logs), not a term added
here. The controller state (tau, updates, last D) is saved in every checkpoint (rlpost/runs/state.py)
and restored on resume. Evaluation batches do not move it.
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

# the engines' floor mismatch: mean |Delta| of a rollout copy of that precision against the fp32 trainer,
# SmolLM2-135M on CPU (bf16: bench/METHODS.md ACRL; fp8: docs/methods.md ACRL); a band containing it never moves tau
FLOORS = {"bf16": (0.03, 0.04), "fp8": (0.13, 0.20)}


FLOOR_SOURCE = "rlpost/corrections/acrl.py FLOORS"


def _logged(rows: list[dict[str, Any]], key: str) -> list[float]:
    """The logged values of ``rlpost/correction/<key>`` in step order."""
    name = f"rlpost/correction/{key}"
    return [float(row[name]) for row in rows if row.get(name) is not None]


@CORRECTIONS.register("acrl")
class AdaptiveControl(Correction):
    """ACRL: a token gate |log pi - log mu| <= tau, tau adapted so the admitted discrepancy stays in a band."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)

    @dataclass(frozen=True)
    class Config(CorrectionSettings):
        # fp8: rollouts from a fake-FP8 copy (the abstract's FP8 engine, rlpost/models/fake_fp8.py)
        rollout_precision: Literal["fp32", "bf16", "fp8"] | None = "fp8"
        # above the bf16 floor (SmolLM2 mean |Delta| 0.03-0.04), below the fp8 one (0.13-0.20): FLOORS
        band_low: Annotated[float, Range(ge=0)] = 5.0e-2
        band_high: Annotated[float, Range(gt=0)] = 1.0e-1
        tau_init: Annotated[float, Range(gt=0)] = 0.5
        tau_min: Annotated[float, Range(gt=0)] = 1.0e-3
        tau_max: Annotated[float, Range(gt=0)] = 5.0
        gain: Annotated[float, Range(gt=0)] = 0.5
        controlled: Literal["real", "admitted"] = "admitted"  # the discrepancy kept in the band

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

    def floor(self) -> tuple[float, float] | None:
        """The measured floor mismatch (``FLOORS``) of this run's rollout copy; None for fp32 or no copy."""
        return FLOORS.get(self.cfg.rollout_precision or "")

    def band_contains_floor(self) -> bool:
        """The band [band_low, band_high] holds the whole floor of the rollout precision (``FLOORS``)."""
        c, floor = self.cfg, self.floor()
        return floor is not None and c.band_low <= floor[0] and floor[1] <= c.band_high

    def config_warnings(self, run: Any) -> list[str]:
        c, floor = self.cfg, self.floor()
        warnings: list[str] = []
        if floor is None:
            return warnings
        where = f"the {c.rollout_precision} mismatch floor (mean |log pi - log mu| {floor[0]:g}-{floor[1]:g}, {FLOOR_SOURCE})"
        if self.band_contains_floor():
            warnings.append(
                f"algorithm/correction=acrl: the band [{c.band_low:g}, {c.band_high:g}] contains {where}: with "
                f"{c.rollout_precision} rollouts the discrepancy sits inside the band, tau stays at "
                f"tau_init={c.tau_init:g} and the gate admits nearly every token, so its activity figure will stay near "
                f"0. Put the band below the floor (rollout_precision=fp8 with the default band) or tau_init lower."
            )
        elif c.controlled == "real" and c.band_high < floor[0]:
            warnings.append(
                f"algorithm/correction=acrl: controlled=real with the band [{c.band_low:g}, {c.band_high:g}] below "
                f"{where}: the gate cannot lower the engines' discrepancy, so tau will fall to tau_min={c.tau_min:g} "
                f"and gate nearly every token. Use controlled=admitted, or a band above the floor."
            )
        return warnings

    def inert_reason(self, rows: list[dict[str, Any]], run: Any) -> str | None:
        """Why the gate removed no token in the whole run: the controlled discrepancy stayed inside the band (tau
        never moved; the band contains the floor when it does), stayed below it (tau only relaxed), or tau stayed
        above every token's |Delta|."""
        c = self.cfg
        in_band = _logged(rows, "in_band")
        if in_band and all(v == 1.0 for v in in_band):
            floor = self.floor()
            where = (
                f" (the band contains the {c.rollout_precision} floor {floor[0]:g}-{floor[1]:g})"
                if floor is not None and self.band_contains_floor()
                else ""
            )
            return (
                f"the {c.controlled} discrepancy stayed inside the band at every step{where}, so tau stayed at "
                f"tau_init={c.tau_init:g} and the gate admitted every token"
            )
        discrepancy = _logged(rows, f"{c.controlled}_discrepancy")
        if discrepancy and max(discrepancy) < c.band_low:
            return (
                f"the {c.controlled} discrepancy stayed below band_low={c.band_low:g} at every step (at most "
                f"{max(discrepancy):.3g}: the engines agree within the band), so tau only relaxed and the gate "
                "admitted every token"
            )
        tau = _logged(rows, "tau")
        if tau:
            return (
                f"tau (down to {min(tau):.3g}) stayed above every token's |log pi - log mu|, so the gate admitted "
                "every token"
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
