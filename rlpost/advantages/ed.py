"""``ed``: exploration-driven GRPO advantages, ED-GRPO (seed 004 #30).

Reading of the abstract (EDO): RL sharpens the sampling distribution while test-time methods want
it flat; EDO adds a *reward-biasing* exploration term to the RL objective so that sampled solutions
stay diverse and entropy is preserved. In GRPO the reward is biased toward completions the policy
finds unlikely (a bonus on their surprisal), which moves probability mass toward alternatives
instead of collapsing onto the most likely solution::

    s_i   = -sum_t m_{i,t} log pi_old(y_{i,t}) / sum_t m_{i,t}      surprisal (token_mean; "sum": no division)
    A_i   = GroupNorm(r)_i + alpha * (s_i - mean_{j in g(i)} s_j)   [N]

``log pi_old`` are the rollout log-probs (``extras["logps"]``, detached: the bias is a reward, not a
loss term). Choices where the abstract is silent:
- The bonus is centred within the group and added *after* GRPO's std normalization: it shifts no
  baseline, and a group whose rewards are all equal gets only the small bonus, not a std-normalized
  +-1 from likelihood noise (which adding alpha * s to r before normalizing would give).
- Surprisal is the token mean by default (length-invariant); ``normalize: sum`` uses the sequence
  negative log-likelihood (favours long completions).
- ``alpha`` is a constant; alpha = 0 gives GRPO exactly. A group with a NaN (unscorable) reward keeps
  its bonus on the scorable members only (the GRPO part is already 0 for the NaN one).
Logged: ``ed/bonus_abs_mean`` (mean |alpha * centred surprisal|) and ``ed/surprisal_mean``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.core.schema import Range


def surprisal(logps: torch.Tensor, mask: torch.Tensor, normalize: str = "token_mean") -> torch.Tensor:
    """logps [N, T], mask [N, T] -> [N] negative log-likelihood per completion (token mean or sum)."""
    width = min(logps.size(1), mask.size(1))
    logps, mask = logps[:, :width].float(), mask[:, :width].float()
    total = -(logps * mask).sum(1)
    return total / mask.sum(1).clamp(min=1.0) if normalize == "token_mean" else total


def centred_bonus(s: torch.Tensor, valid: torch.Tensor, g: int) -> torch.Tensor:
    """s [N], valid [N] bool -> [N] s minus its group mean over valid members (0 for invalid ones)."""
    s = torch.where(valid, s, torch.zeros_like(s)).view(-1, g)
    v = valid.view(-1, g).float()
    mean = (s * v).sum(1, keepdim=True) / v.sum(1, keepdim=True).clamp(min=1.0)
    return ((s - mean) * v).reshape(-1)


@ADVANTAGES.register("ed")
class ExplorationDriven(Advantage):
    """ED-GRPO: GRPO advantage plus alpha x the group-centred surprisal of each completion (reward-biased exploration)."""

    seed = "seed 004 #30"
    requires = frozenset({"logps"})

    @dataclass(frozen=True)
    class Config:
        scale: Literal["group", "batch", "none"] = "group"  # base advantage: group_norm's std scaling
        leave_one_out: bool = False  # base advantage: RLOO baseline (group_norm)
        eps: Annotated[float, Range(ge=0)] = 1e-4  # base advantage: added to the std (group_norm)
        alpha: Annotated[float, Range(ge=0)] = 0.1  # weight of the exploration bonus
        normalize: Literal["token_mean", "sum"] = "token_mean"  # surprisal per token, or per sequence

        def __post_init__(self) -> None:
            if self.alpha < 0:
                raise ValueError(f"alpha must be >= 0, got {self.alpha}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.base = GroupNorm(
            GroupNorm.Config(scale=self.cfg.scale, leave_one_out=self.cfg.leave_one_out, eps=self.cfg.eps)
        )

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], extras["logps"] [N, T] -> advantages [N], metrics."""
        if "logps" not in batch.extras:
            raise ValueError("advantage 'ed' needs the rollout log-probs (extras['logps']); the trainer fills them")
        base, metrics = self.base(batch)
        s = surprisal(batch.extras["logps"], batch.completion_mask, self.cfg.normalize).to(base.device)
        valid = ~torch.isnan(batch.rewards.to(base.device)) & (batch.completion_mask.sum(1).to(base.device) > 0)
        bonus = self.cfg.alpha * centred_bonus(s, valid, batch.num_generations)
        advantages = base + bonus
        metrics.update(
            {
                "advantage/mean": float(advantages.mean()),
                "advantage/abs_mean": float(advantages.abs().mean()),
                "ed/bonus_abs_mean": float(bonus.abs().mean()),
                "ed/surprisal_mean": float(s[valid].mean()) if valid.any() else 0.0,
            }
        )
        return advantages, metrics

    def describe(self) -> str:
        per = "token-mean" if self.cfg.normalize == "token_mean" else "sequence"
        return (
            f"{self.base.describe()}; + {self.cfg.alpha:g} x (surprisal_i - mean_group(surprisal)), {per} -log pi_old"
        )
