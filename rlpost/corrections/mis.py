"""``mis``: masked importance sampling between the training and the behaviour policy.

Like ``tis`` (same ratio pi/mu, per token or per sequence), but instead of truncating, a ratio
outside ``[low, high]`` removes the token (or the whole sequence) from the loss:

    w = r * 1[low <= r <= high],   r = pi(y_t)/mu(y_t)  (token)  or  prod_t pi(y_t)/mu(y_t)  (sequence)

This is TRL's ``token_mask``/``sequence_mask`` vLLM mode, for any behaviour policy. Logged: weight
mean/min/max and the masked fraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

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
from rlpost.corrections.tis import importance_ratio


@CORRECTIONS.register("mis")
class MaskedIS(Correction):
    """Masked importance sampling: loss x pi/mu, tokens (or sequences) with pi/mu outside [low, high] dropped."""

    @dataclass(frozen=True)
    class Config(CorrectionSettings):
        level: Literal["token", "sequence"] = "token"
        low: Annotated[float, Range(ge=0)] = 0.5
        high: Annotated[float, Range(gt=0)] = 2.0

        def __post_init__(self):
            if not 0 <= self.low < self.high:
                raise ValueError(f"need 0 <= low < high, got low={self.low}, high={self.high}")

    def __call__(self, x: CorrectionInputs) -> tuple[torch.Tensor, dict[str, float]]:
        ratio = importance_ratio(x, self.cfg.level)
        outside = (ratio < self.cfg.low) | (ratio > self.cfg.high)
        weights = ratio.masked_fill(outside, 0.0)
        metrics = weight_metrics(weights, x.mask)
        metrics["masked_fraction"] = fraction(outside, x.mask)
        return weights, metrics

    def describe(self) -> str:
        return (
            f"mis: loss x pi/mu, zero where pi/mu is outside [{self.cfg.low:g}, {self.cfg.high:g}] "
            f"({self.cfg.level} level), mu = the rollout policy"
        )
