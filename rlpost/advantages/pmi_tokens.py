"""``pmi_tokens``: P-GRPO, progressive PMI-inspired token-level modulation of GRPO (seed 000 #22).

The group advantage of a completion is redistributed over its tokens by how characteristic each
token is of the group's successful (A > 0) or failed (A < 0) completions, and the modulation is
ramped in over training::

    A_i        = GroupNorm(r)_i                                         GRPO advantage
    p_P(v)     = (c_P(v) + a) / (n_P + a V),  p_all(v) = (c(v) + a) / (n + a V)   token counts in the group
    pmi_{i,t}  = log p_{S_i}(y_{i,t}) / p_all(y_{i,t})                 S_i = P (A_i > 0) or N (A_i < 0)
    u_{i,t}    = exp(lam_k * clip(pmi_{i,t}, -c, c)),   w_{i,t} = u_{i,t} / mean_t(u_{i,t})
    A_{i,t}    = A_i * w_{i,t}                                          [N, T]
    lam_k      = strength * min(1, k / ramp_steps)                      k = batches seen, this one included

c(v) counts token id v over the valid tokens of the counting scope, c_P(v) over those of its
positive completions (n, n_P their totals), V = distinct token ids in the scope, a = ``smoothing``.
The scope (``scope``) is the whole generation batch by default (``batch``): successes and failures of
every group, each completion's set chosen by the sign of its own group's advantage; ``group`` counts
inside each group only. The mean
of w over a completion's tokens is 1, so each completion keeps its GRPO advantage in total (sum_t
A_{i,t} = T_i A_i); only the credit per token changes. ``strength: 0`` is GRPO exactly.

Choices where the abstract is silent:
- "PMI" is between a token and the outcome: log p(token | success) / p(token), the cheapest reading
  that needs no extra forward pass (a context-free PMI log p(y_t|x,y<t) - log p(y_t|y<t) would need
  one without the prompt); failures use the failed set's PMI, so tokens typical of failures take more
  of the blame. Counted over the batch by default: inside one group of G short completions a token
  rarely repeats, and a token seen once has the same PMI as every other (log n / n_P), so in-group
  counts give back GRPO's uniform credit; across the batch's groups the recurring tokens of successes
  (and of failures) separate. A batch whose tokens never repeat at all is GRPO under either scope.
- "Progressive" is a linear ramp of the modulation strength over ``ramp_steps`` generation batches
  (0 = full strength at once); the batch count is saved in checkpoints.
- Weights are normalized per completion (mean 1 over its valid tokens) so sequence-level credit and
  the loss scale are GRPO's; ``clip`` bounds a single token's weight before normalization.
- Metrics: ``pmi/strength`` (lam_k), ``pmi/weight_max`` and ``pmi/weight_std`` over valid tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.core.schema import Range


def token_pmi(ids: torch.Tensor, mask: torch.Tensor, sign: torch.Tensor, smoothing: float) -> torch.Tensor:
    """One group: ids [G, T], mask [G, T] bool, sign [G] (+1/-1/0) -> pmi [G, T] (0 off the mask or sign 0)."""
    vocab, inverse = torch.unique(ids[mask], return_inverse=True)
    v = vocab.numel()
    pmi = torch.zeros(ids.shape, dtype=torch.float64)
    if v == 0:
        return pmi
    rows = sign.unsqueeze(1).expand_as(ids)[mask]  # [M] sign of each valid token's completion
    total = torch.bincount(inverse, minlength=v).double()
    p_all = (total + smoothing) / (total.sum() + smoothing * v)
    values = torch.zeros(inverse.numel(), dtype=torch.float64)
    for s in (1, -1):
        own = rows == s
        if not own.any():
            continue
        count = torch.bincount(inverse[own], minlength=v).double()
        p_own = (count + smoothing) / (count.sum() + smoothing * v)
        values[own] = torch.log(p_own[inverse[own]] / p_all[inverse[own]])
    pmi[mask] = values
    return pmi


@ADVANTAGES.register("pmi_tokens")
class PMITokens(Advantage):
    """GRPO advantage redistributed over tokens by success/failure PMI over the batch, ramped in (P-GRPO) [N, T]."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)

    seed = "seed 000 #22"

    @dataclass(frozen=True)
    class Config:
        strength: Annotated[float, Range(ge=0)] = 1.0  # lam at full ramp: exponent of the PMI weight (0 = GRPO)
        ramp_steps: Annotated[int, Range(ge=0)] = 10  # generation batches to reach full strength (0 = from the start)
        smoothing: Annotated[float, Range(ge=0)] = 1.0  # additive (Laplace) smoothing of the token counts
        clip: Annotated[float, Range(gt=0)] = 2.0  # |PMI| cap before the weight is formed
        scope: Literal["batch", "group"] = "batch"  # where tokens are counted: the whole batch, or each group
        scale: Literal["group", "batch", "none"] = "group"  # base advantage: group_norm's std scaling
        eps: Annotated[float, Range(ge=0)] = 1e-4  # base advantage: added to the std

        def __post_init__(self) -> None:
            if self.strength < 0 or self.ramp_steps < 0 or self.smoothing < 0 or self.clip <= 0:
                raise ValueError("strength, ramp_steps and smoothing must be >= 0, clip > 0")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.base = GroupNorm(GroupNorm.Config(scale=self.cfg.scale, eps=self.cfg.eps))
        self.count = 0  # generation batches seen

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])

    def strength(self) -> float:
        c = self.cfg
        return c.strength if c.ramp_steps == 0 else c.strength * min(1.0, self.count / c.ramp_steps)

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], completion_ids [N, T], completion_mask [N, T] -> advantages [N, T], metrics."""
        cfg, g = self.cfg, batch.num_generations
        base, metrics = self.base(batch)
        self.count += 1
        lam = self.strength()
        mask = batch.completion_mask > 0
        ids = batch.completion_ids[:, : mask.size(1)].cpu()
        sign = torch.sign(base).cpu()
        size = g if cfg.scope == "group" else len(base)  # rows counted together
        pmi = torch.cat(
            [
                token_pmi(ids[k : k + size], mask[k : k + size].cpu(), sign[k : k + size], cfg.smoothing)
                for k in range(0, len(base), size)
            ]
        )
        u = torch.exp(lam * pmi.clamp(-cfg.clip, cfg.clip)) * mask.cpu()
        per_row = u.sum(1, keepdim=True) / mask.cpu().sum(1, keepdim=True).clamp(min=1)
        weights = torch.where(mask.cpu(), u / per_row.clamp(min=1e-12), torch.ones_like(u)).to(base.device, base.dtype)
        advantages = base.unsqueeze(1) * weights
        valid_w = weights[mask]
        token_adv = advantages[mask]
        metrics.update(
            {
                "pmi/strength": lam,
                "pmi/weight_max": float(valid_w.max()) if valid_w.numel() else 1.0,
                "pmi/weight_std": float(valid_w.std()) if valid_w.numel() > 1 else 0.0,
                "advantage/abs_mean": float(token_adv.abs().mean()) if token_adv.numel() else 0.0,
                "advantage/std": float(token_adv.std()) if token_adv.numel() > 1 else 0.0,
            }
        )
        return advantages, metrics

    def describe(self) -> str:
        c = self.cfg
        return (
            f"A[i, t] = GRPO A_i * w[i, t], w = exp(lam * clip(PMI(token; success|failure in {c.scope}), {c.clip:g})) "
            f"normalized to mean 1 per completion, lam ramped to {c.strength:g} over {c.ramp_steps} batches"
        )
