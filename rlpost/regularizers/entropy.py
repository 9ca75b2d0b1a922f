"""``entropy``: an entropy bonus, as a per-token term ``-coef * H_t`` added to the policy loss.

``H_t`` is the entropy of pi_theta's next-token distribution at completion position t (TRL's
``entropies`` from ``_get_per_token_logps_and_entropies``), ``[B, T]``. Minimizing ``-coef * H``
raises entropy (exploration).

Choice (differs from TRL 1.16): the term goes through the *same* aggregation as the policy loss
(token-mean, seq-mean-token-mean or seq-mean-token-sum-norm), so the composed objective is one
aggregated per-token sum and ``rlpost show`` prints one normalization. TRL instead always takes a
separate per-micro-batch token mean, ``coef * sum(H*m)/sum(m) / grad_accum``, whatever the loss
type. The two agree for ``token-mean`` up to how tokens are spread across micro-batches (the rlpost
version is the exact token mean over the optimizer step), and for ``seq-mean-token-mean`` when all
counted sequences have equal length; with ``seq-mean-token-sum-norm`` the bonus is scaled by
``sum(m) / (B * max_completion_length)`` like the policy loss. TRL's adaptive coefficient is not
implemented here. Fails loudly if the trainer did not compute entropies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.core.schema import Range
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LossInputs
from rlpost.regularizers.base import REGULARIZERS, Regularizer


@REGULARIZERS.register("entropy")
class Entropy(Regularizer):
    """Entropy bonus: per-token -coef * H(pi_theta), aggregated like the policy loss."""

    @dataclass(frozen=True)
    class Config:
        coef: Annotated[float, Range(ge=0)] = 0.001  # weight of the entropy bonus (loss term -coef * H per token)

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """entropies [B, T] -> per-token term -coef * entropies [B, T], metrics."""
        if x.entropies is None:
            raise ValueError(
                "regularizer 'entropy' needs per-token entropies, but LossInputs.entropies is None "
                "(the trainer must call _get_per_token_logps_and_entropies with compute_entropy=True)"
            )
        term = -self.cfg.coef * x.entropies
        # the trainer logs this as "<name>/bonus": coef times the masked token mean of H (what is subtracted)
        return term, {"bonus": self.cfg.coef * masked_metric_mean(x.entropies.detach(), x.mask)}

    def describe(self) -> str:
        return f"-{self.cfg.coef:g} * H(pi_theta) per token, aggregated with the policy loss"
