"""``tis``: truncated importance sampling between the training and the behaviour policy.

The rollouts were sampled by a behaviour policy mu (a bf16 rollout copy, vLLM, a peer model),
the gradient is taken for the training policy pi. Standard TIS re-weights each token by

    w_t = min(pi(y_t) / mu(y_t), cap)                                level: token     [N, T]
    w   = min(prod_t pi(y_t) / mu(y_t), cap)                         level: sequence  [N, 1]

with ``pi`` the trainer's log-probs at generation time (detached, as in TRL's vLLM correction).
Choices: no lower bound (classic TIS truncates from above only; ``mis`` masks both sides); the
sequence ratio is the plain product over counted tokens, not a length-normalized geometric mean
(use a small ``cap`` with long completions). Logged: weight mean/min/max, clipped fraction.
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
    sequence_log_ratio,
    weight_metrics,
)


def importance_ratio(x: CorrectionInputs, level: str) -> torch.Tensor:
    """pi / mu per token [N, T] (1 on masked-out tokens) or per sequence [N, 1]."""
    log_ratio = x.log_ratio if level == "token" else sequence_log_ratio(x)
    return torch.exp(log_ratio)


@CORRECTIONS.register("tis")
class TruncatedIS(Correction):
    """Truncated importance sampling: loss x min(pi/mu, cap), per token or per sequence."""

    @dataclass(frozen=True)
    class Config(CorrectionSettings):
        level: Literal["token", "sequence"] = "token"
        cap: Annotated[float, Range(gt=0)] = 2.0

        def __post_init__(self):
            if self.cap <= 0:
                raise ValueError(f"cap={self.cap} must be > 0")

    def __call__(self, x: CorrectionInputs) -> tuple[torch.Tensor, dict[str, float]]:
        ratio = importance_ratio(x, self.cfg.level)
        weights = ratio.clamp(max=self.cfg.cap)
        metrics = weight_metrics(weights, x.mask)
        metrics["clipped_fraction"] = fraction(ratio > self.cfg.cap, x.mask)
        return weights, metrics

    def describe(self) -> str:
        ratio = "pi(y_t)/mu(y_t)" if self.cfg.level == "token" else "prod_t pi(y_t)/mu(y_t)"
        return f"tis: loss x min({ratio}, {self.cfg.cap:g}), mu = the rollout policy ({self.cfg.level} level)"
