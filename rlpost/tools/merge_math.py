"""The weight arithmetic of ``rlpost merge``, one tensor at a time (pure functions, float32 math).

- ``linear`` (checkpoint interpolation, seed 000 #1: MiLMMT interpolates its SFT and RL
  checkpoints): ``theta = (1 - alpha) * A + alpha * B``. Written in this form (not
  ``A + alpha * (B - A)``) so that alpha = 0 and alpha = 1 return A and B bit for bit.
- ``task_arithmetic`` (merging RL-trained models, seed 000 #21; Ilharco et al.'s task vectors):
  ``theta = base + scale * sum_i lambda_i * (theta_i - base)``.
- ``ties`` (seed 000 #21 compares merging methods; TIES-Merging, Yadav et al. 2023):
  1. trim: each task vector ``tau_i = lambda_i * (theta_i - base)`` keeps its ``ceil(density * numel)``
     largest-magnitude entries (per tensor), the rest become 0;
  2. elect sign: ``gamma = sign(sum_i trimmed tau_i)`` per entry (the total-mass rule);
  3. disjoint mean: per entry, the mean of the trimmed values whose sign equals ``gamma`` (zeros
     and disagreeing values do not count; an entry nobody keeps stays 0);
  ``theta = base + scale * merged``.
Choices the abstracts leave open: lambda_i scales a task vector before trimming (magnitudes are
compared after weighting); ties at the trim threshold keep the entries ``torch.topk`` returns;
all math is float32 and the result is cast back to the first input's dtype; alpha = 0 or 1 and
other exact cases copy the input tensor rather than recomputing it.
"""

from __future__ import annotations

import math

import torch


def linear(a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    """``(1 - alpha) * a + alpha * b`` in float32, cast to ``a.dtype``; shapes ``[*]``."""
    if alpha == 0.0:
        return a.clone()
    if alpha == 1.0:
        return b.to(a.dtype).clone()
    out = (1.0 - alpha) * a.float() + alpha * b.float()
    return out.to(a.dtype)


def task_vectors(base: torch.Tensor, models: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    """``[M, *]``: ``lambda_i * (theta_i - base)`` in float32."""
    return torch.stack([w * (m.float() - base.float()) for m, w in zip(models, weights)])


def task_arithmetic(base: torch.Tensor, models: list[torch.Tensor], weights: list[float], scale: float) -> torch.Tensor:
    """``base + scale * sum_i lambda_i (theta_i - base)``, cast to ``base.dtype``."""
    merged = task_vectors(base, models, weights).sum(dim=0)
    return (base.float() + scale * merged).to(base.dtype)


def trim(tau: torch.Tensor, density: float) -> torch.Tensor:
    """Keep the ``ceil(density * numel)`` largest |entries| of one task vector ``[*]``; zero the rest."""
    n = tau.numel()
    k = min(n, max(0, math.ceil(density * n)))
    if k >= n:
        return tau.clone()
    flat = tau.reshape(-1)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    if k > 0:
        keep[flat.abs().topk(k).indices] = True
    return torch.where(keep, flat, torch.zeros_like(flat)).reshape(tau.shape)


def ties_merge(taus: torch.Tensor, density: float) -> torch.Tensor:
    """TIES on stacked task vectors ``[M, *]`` -> merged task vector ``[*]`` (trim, elect, disjoint mean)."""
    trimmed = torch.stack([trim(t, density) for t in taus])
    gamma = torch.sign(trimmed.sum(dim=0))  # [*]: the elected sign (0 where the mass cancels)
    agree = (torch.sign(trimmed) == gamma) & (trimmed != 0)  # [M, *]
    count = agree.sum(dim=0)
    total = torch.where(agree, trimmed, torch.zeros_like(trimmed)).sum(dim=0)
    return torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))


def ties(
    base: torch.Tensor, models: list[torch.Tensor], weights: list[float], scale: float, density: float
) -> torch.Tensor:
    """``base + scale * ties_merge(lambda_i (theta_i - base))``, cast to ``base.dtype``."""
    merged = ties_merge(task_vectors(base, models, weights), density)
    return (base.float() + scale * merged).to(base.dtype)
