"""The advantage base class, its registry, and the typed group batch every estimator reads.

Shapes: N = number of completions in the generation batch (prompts x G), G = completions per
prompt, R = reward terms, T = completion length (padded). Rows ``g*G .. g*G+G-1`` share a prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from rlpost.core.activity import changed, share
from rlpost.core.component import Component
from rlpost.core.errors import ConfigError
from rlpost.core.registry import Registry


@dataclass
class GroupBatch:
    """What an advantage estimator may read about one generation batch."""

    rewards: torch.Tensor  # [N] combined scalar reward (after `combine`)
    reward_terms: torch.Tensor  # [N, R] each reward term, unweighted
    term_names: list[str]
    num_generations: int  # G
    completion_mask: torch.Tensor  # [N, T] 1.0 on completion tokens that count
    completion_ids: torch.Tensor  # [N, T]
    rows: list[dict[str, Any]] = field(default_factory=list)  # the dataset row of each completion
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # optional [N, T] tensors (e.g. entropies)
    # [N][T] decoded piece of each token (requires={"token_text"})
    token_text: list[list[str]] = field(default_factory=list)

    @property
    def num_groups(self) -> int:
        return self.rewards.numel() // self.num_generations

    def grouped(self, x: torch.Tensor) -> torch.Tensor:
        """[N, ...] -> [N / G, G, ...]."""
        return x.view(self.num_groups, self.num_generations, *x.shape[1:])


@dataclass
class Estimate:
    """An advantage estimator's result: ``advantages`` [N] or [N, T], float metrics, named by-products."""

    advantages: torch.Tensor
    metrics: dict[str, float]
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. {"returns": [N, T]} (GAE)


def advantage_metrics(advantages: torch.Tensor) -> dict[str, float]:
    """advantages [N] -> ``advantage/mean``, ``advantage/std`` (unbiased, 0 if N = 1), ``advantage/abs_mean``."""
    return {
        "advantage/mean": float(advantages.mean()),
        "advantage/std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
        "advantage/abs_mean": float(advantages.abs().mean()),
    }


Scale = Literal["group", "batch", "none"]  # divide by the group std, the batch std, or not at all


def nanstd(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Unbiased std ignoring NaNs (TRL's ``nanstd``): NaN where fewer than 2 values are not NaN."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    var = var * torch.where(count > 1, count / (count - 1), torch.full_like(var, float("nan")))
    return torch.sqrt(var).squeeze(dim)


def group_relative(
    rewards: torch.Tensor, g: int, scale: Scale = "group", leave_one_out: bool = False, eps: float = 1e-4
) -> tuple[torch.Tensor, torch.Tensor]:
    """rewards [N] (NaN = unscorable), G -> (advantages [N], NaN where undefined; group std [N/G]).

    The formula of group_norm's module docstring (rlpost/advantages/group_norm.py) before TRL's last step
    (NaN -> 0), which callers choose."""
    if not rewards.is_floating_point():
        rewards = rewards.float()
    if g < 1 or rewards.numel() % g:
        raise ValueError(f"group_norm: {rewards.numel()} rewards do not split into groups of {g}")
    grouped = rewards.view(-1, g)  # [N/G, G]
    if leave_one_out:
        valid = ~torch.isnan(grouped)
        n = valid.sum(1, keepdim=True).to(rewards.dtype)
        total = torch.nansum(grouped, dim=1, keepdim=True)
        others = (total - grouped) / (n - 1).clamp(min=1.0)  # [N/G, G] mean of the other valid rewards
        baseline = torch.where(n > 1, others, torch.full_like(others, float("nan"))).reshape(-1)  # A -> 0 if n <= 1
    else:
        baseline = torch.nanmean(grouped, dim=1).repeat_interleave(g)
    group_std = nanstd(grouped, dim=1) if g > 1 else rewards.new_zeros(grouped.size(0))
    advantages = rewards - baseline
    if scale == "group":
        advantages = advantages / (group_std.repeat_interleave(g) + eps)
    elif scale == "batch":
        std = nanstd(rewards) if rewards.numel() > 1 else rewards.new_zeros(())
        advantages = advantages / (std + eps)
    return advantages, group_std


def grpo_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """rewards [N] (NaN = unscorable), G -> GRPO's advantage [N]: (r - mean_group) / (std_group + 1e-4), unbiased
    std, 0 where undefined (TRL 1.16's, ``group_norm`` with its defaults). The no-op every activity figure of an
    advantage or a combine is measured against (rlpost/core/activity.py)."""
    return torch.nan_to_num(group_relative(rewards.float(), num_generations)[0], nan=0.0)


class Advantage(Component):
    """Maps a group batch to advantages: [N] (one per completion) or [N, T] (per token).

    Optional members: ``activity`` (below); ``requires``, ``check_run``, ``describe``, ``state_dict``, ...:
    ``Component``.
    """

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Group batch -> advantages [N] or [N, T], and float metrics."""
        raise NotImplementedError

    def estimate(self, batch: GroupBatch) -> Estimate:
        """What the pipeline (rlpost/pipeline.py, step 3.5) calls: the advantages, metrics and any by-products
        the trainer needs (GAE's value targets ``returns`` [N, T]); by default ``self(batch)`` and none."""
        advantages, metrics = self(batch)
        return Estimate(advantages, metrics)

    def activity(self, batch: GroupBatch, advantages: torch.Tensor) -> float | None:
        """``active/advantage/<name>`` of one training batch (rlpost/core/activity.py): the share of rows ([N]
        advantages) or of counted tokens ([N, T], ``batch.completion_mask``) whose advantage differs from GRPO's
        group-normalised advantage of the same rewards (``grpo_advantages(batch.rewards)``, per row, broadcast over
        its tokens), up to one positive factor for the whole batch (``scale_free``). Only the estimate's output is
        read: nothing is computed twice and no state moves. None: not reported (group_norm with GRPO's settings)."""
        noop = grpo_advantages(batch.rewards, batch.num_generations).to(advantages.device)
        if advantages.dim() == 2:
            mask = batch.completion_mask[:, : advantages.size(1)].to(advantages.device)
            return share(changed(advantages, noop.unsqueeze(1), mask, scale_free=True), mask)
        return share(changed(advantages, noop, scale_free=True))


ADVANTAGES: Registry[Advantage] = Registry("advantage", Advantage)


def term_index(names: list[str], name: str, where: str) -> int:
    """Position of reward term ``name`` in ``names`` [R]; ConfigError naming ``where`` otherwise."""
    if name not in names:
        raise ConfigError(f"{where}={name!r} is not a reward term of this run. Reward terms: {', '.join(names)}.")
    return names.index(name)


def nan_weighted_sum(terms: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """terms [N, R], weights [R] -> [N]: sum_j w_j R[:, j] over non-NaN terms; NaN where all are NaN."""
    total = (terms * weights.to(terms.device, terms.dtype).unsqueeze(0)).nansum(dim=1)
    return total.masked_fill(torch.isnan(terms).all(dim=1), float("nan"))
