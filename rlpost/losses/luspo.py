"""``luspo``: Length-Unbiased Sequence Policy Optimization (LUSPO, arXiv 2602.05261).

TRL 1.16 ``loss_type="luspo"``: GSPO's clipped surrogate on the sequence ratio, with each
sequence's loss scaled by its length, which removes GSPO's bias against long responses::

    log s_i = sum_t (logps - old_logps) * m / max(sum_t m, 1)                           [B, 1]
    g_i     = -min(s_i * A_i, clamp(s_i, 1 - epsilon_low, 1 + epsilon_high) * A_i)      (gspo's loss)
    loss_i  = |o_i| * g_i,   |o_i| = sum_t m                                            [B, 1]

Under ``seq-mean-token-mean`` (the ``luspo`` bundle's, as ``grpo``'s) the step's loss is
``mean_i |o_i| g_i``: TRL's luspo, whose aggregation ``(per_token_loss * mask).sum(-1).mean()`` sums
the broadcast ``[B, 1]`` sequence loss over each sequence's tokens.

Choices:
- The length is part of the loss, not of the aggregation, so the regularizers keep their meaning:
  KL in the loss stays a token mean per sequence. TRL's luspo aggregation sums every per-token term
  over the sequence, KL included, so with ``kl.coef > 0`` the two differ in the KL term only (the
  paper has no KL; without it they are the same objective).
- Always sequence-level: TRL only warns when luspo runs with token ratios; here there is none.
- A token-sum aggregation (``token-mean``, ``seq-mean-token-sum-norm``, ``seq-mean-token-sum``)
  would weight each sequence by its length a second time (``|o_i|^2 g_i``), so ``check_run`` refuses
  it: TRL warns about the same length weighting for a sequence-level loss under its token-sum types.
- Defaults ``epsilon_low=2e-3``, ``epsilon_high=2.5e-3``: the paper's range (section 5.1), as TRL's
  documentation reproduces it (TRL's generic default would be 0.2/0.2).
- ``ratio_cap`` (TRL ``delta``) and ``dual_clip`` are offered as for ``gspo``, off by default.
Metrics: ``clip_ratio/*`` over sequences, as ``gspo`` and TRL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.losses.base import LOSSES, LossInputs, PolicyLoss
from rlpost.losses.clip import as_2d, check_clip_fields, clipped_surrogate, describe_clip
from rlpost.losses.gspo import sequence_log_ratio

# the one aggregation that counts each sequence once, whatever its length
PER_SEQUENCE = "seq-mean-token-mean"


@LOSSES.register("luspo")
class LUSPO(PolicyLoss):
    """LUSPO: GSPO's sequence-ratio clipped surrogate times the sequence length."""

    @dataclass(frozen=True)
    class Config:
        # lower clip of the sequence ratio: s >= 1 - epsilon_low
        epsilon_low: Annotated[float, Range(ge=0, lt=1)] = 2e-3
        # upper clip of the sequence ratio: s <= 1 + epsilon_high
        epsilon_high: Annotated[float, Range(ge=0)] = 2.5e-3
        dual_clip: Annotated[float | None, Range(gt=1)] = None  # dual-clip constant c > 1 for A < 0 (off by default)
        # cap the unclipped sequence ratio before the min (TRL delta; off by default)
        ratio_cap: Annotated[float | None, Range(gt=0)] = None

        def __post_init__(self) -> None:
            check_clip_fields(self)

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps, mask [B, T], advantages [B, 1] -> loss [B, 1] (broadcast over tokens), metrics."""
        coef_1 = torch.exp(sequence_log_ratio(x.logps, x.old_logps, x.mask))  # [B, 1]
        per_sequence, metrics = clipped_surrogate(coef_1, as_2d(x.advantages), x.mask, self.cfg)
        length = x.mask.to(per_sequence.dtype).sum(-1, keepdim=True)  # [B, 1]
        return per_sequence * length, metrics

    def check_run(self, run: Any) -> None:
        aggregation = run.algorithm.aggregation
        if aggregation != PER_SEQUENCE:
            raise ConfigError(
                f"algorithm/loss=luspo already scales each sequence's loss by its length, and "
                f"algorithm.aggregation={aggregation} sums it over the sequence's tokens, which scales it by the "
                f"length again (|o|^2); use algorithm.aggregation={PER_SEQUENCE} (algorithm=luspo)."
            )

    def describe(self) -> str:
        return "|o| * " + describe_clip(self.cfg, "r = exp(mean_t log(pi/pi_old)) per sequence, |o| its length")
