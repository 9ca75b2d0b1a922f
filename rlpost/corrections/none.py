"""``none``: no correction (the default). The loss is left exactly as it is.

With ``rollout_precision`` set, rollouts still come from the lower-precision copy and the
train-inference discrepancy is measured and logged every step (``mismatch/*``), but nothing is
re-weighted: the uncorrected baseline every correction is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlpost.corrections.base import CORRECTIONS, Correction, CorrectionInputs, CorrectionSettings


@CORRECTIONS.register("none")
class NoCorrection(Correction):
    """No correction: the policy loss is not re-weighted (mismatch is still measured when rollouts differ)."""

    @dataclass(frozen=True)
    class Config(CorrectionSettings):
        pass

    def __call__(self, x: CorrectionInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """Weights of exactly 1, [N, 1]; the trainer does not even apply them."""
        return torch.ones(x.mask.size(0), 1, device=x.mask.device), {}

    def activity(self, x: CorrectionInputs, weights: torch.Tensor) -> float | None:
        """None: weight 1 is the no-op itself (nothing is reported)."""
        return None

    def describe(self) -> str:
        return "none: the policy loss is not re-weighted"
