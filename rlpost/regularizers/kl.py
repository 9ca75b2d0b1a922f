"""The KL term in the loss (``algorithm.kl`` with ``placement: loss``) as a regularizer.

Its estimators, settings and the other placements are in rlpost/losses/kl.py. Built by ``build_run`` from
``algorithm.kl`` and put first in ``algorithm.regularizers``; not a registered choice of its own.
"""

from __future__ import annotations

import torch

from rlpost.losses.base import LossInputs
from rlpost.losses.kl import KLConfig, kl_loss_term
from rlpost.regularizers.base import Regularizer


class KLPenalty(Regularizer):
    """``coef * KL_est(pi || ref)`` per token in the loss (``algorithm.kl``, placement=loss); logs ``kl``."""

    Config = KLConfig  # type: ignore[assignment]  # the nested Config is a shared settings dataclass, not a subclass
    registry_name = "kl"  # its name in algorithm.regularizers (built from algorithm.kl, not registered)

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """LossInputs with ref_logps [B, T] -> per-token ``coef * kl`` [B, T], metric ``kl``."""
        return kl_loss_term(x, self.cfg)

    def describe(self) -> str:
        return f"{self.cfg.coef:g} x KL_{self.cfg.estimator}(pi || ref)"
