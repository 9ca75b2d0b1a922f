"""``top_entropy``: the policy loss trains only the high-entropy tokens (TRL 1.16 ``top_entropy_quantile``).

"Beyond the 80/20 Rule" (Wang et al. 2025, arXiv 2506.01939): the few high-entropy "forking" tokens
carry the useful policy gradient. With ``rho = quantile`` (the fraction kept) and ``m`` the loss mask
of one micro-batch::

    tau   = quantile_{1 - rho}( { H_t : m_t = 1 } over the micro-batch on every process )   linear interpolation
    sel_t = 1[H_t >= tau] * m_t                                                  [B, T]
    l_t   = sel_t * policy_loss_t + (KL and the other regularizers, on every token)

so ``rho = 0.2`` keeps the top 20% (ties at tau included), ``rho = 0`` keeps the maximum-entropy
token(s) only and ``rho = 1`` keeps every token. It is a token *selection*, not a new normalization:
the aggregation's normalizer still counts every token of ``m`` (a dropped token adds 0 but still
counts, as in TRL), and the KL term is not selected. The ``entropy`` bonus acts on the selected tokens
(``x.policy_mask``), as TRL's does.

Choices as TRL 1.16 (``get_high_entropy_mask``): the quantile is recomputed for every micro-batch,
over its counted tokens gathered from all processes; ``H`` is the current policy's entropy at loss
time; no counted token anywhere -> nothing is trained. Its loss term is 0 (it only selects). Metrics:
``kept_frac`` (selected / counted tokens of this micro-batch) and ``threshold`` (tau).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.core.schema import Range
from rlpost.losses.base import LossInputs
from rlpost.regularizers.base import REGULARIZERS, Regularizer


def high_entropy_mask(
    entropies: torch.Tensor, mask: torch.Tensor, pooled: torch.Tensor, keep: float
) -> tuple[torch.Tensor, float]:
    """entropies, mask [B, T], pooled [K] (every counted entropy of the batch) -> (0/1 [B, T]: H >= tau, tau),
    tau = the (1 - keep) quantile of pooled (NaN and nothing kept when pooled is empty)."""
    if pooled.numel() == 0:
        return torch.zeros_like(mask), float("nan")
    threshold = torch.quantile(pooled.float(), 1.0 - keep)
    counted = mask > 0
    return ((entropies * counted >= threshold) & counted).to(mask.dtype), float(threshold)


@REGULARIZERS.register("top_entropy")
class TopEntropy(Regularizer):
    """Token selection: the policy loss counts only tokens at or above the (1 - quantile) entropy quantile."""

    @dataclass(frozen=True)
    class Config:
        # rho: the fraction of counted tokens, by entropy, whose policy loss trains (TRL's top_entropy_quantile)
        quantile: Annotated[float, Range(ge=0, le=1)] = 0.2

        def __post_init__(self) -> None:
            if not 0.0 <= self.quantile <= 1.0:
                raise ValueError(f"quantile={self.quantile} must be in [0, 1]")

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.threshold = float("nan")  # tau of the last micro-batch (a metric only; NaN = every token kept)

    def policy_mask(self, x: LossInputs) -> torch.Tensor | None:
        """entropies, mask [B, T] -> selection [B, T] (None when every token is kept, quantile = 1)."""
        if self.cfg.quantile >= 1.0:
            return None
        if x.entropies is None:
            raise ValueError("regularizer 'top_entropy' needs per-token entropies, but LossInputs.entropies is None")
        entropies = x.entropies.detach()
        pooled = x.context.gather(entropies[x.mask > 0].float())  # [K] over every process
        selection, self.threshold = high_entropy_mask(entropies, x.mask, pooled, self.cfg.quantile)
        return selection

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """No loss term of its own (a scalar 0); metrics of the selection the trainer applied."""
        kept = float(x.trained_mask.sum() / x.mask.sum().clamp(min=1.0))
        return x.logps.new_zeros(()), {"kept_frac": kept, "threshold": self.threshold}

    def describe(self) -> str:
        rho = self.cfg.quantile
        return (
            f"policy loss only on the top {rho:g} of tokens by entropy (H >= the {1 - rho:g} quantile of the "
            "micro-batch on all processes); the KL and the normalizer still count every token"
        )
