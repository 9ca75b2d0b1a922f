"""``rdpo``: Reward-Decorrelated Policy Optimization (seed 004 #22).

Mixed rewards [N, R] -> one group-centred advantage [N] in three steps. Per prompt group g
(G rows) and reward column j, over the column's scorable (non-NaN) values:

    1. quantile:   u_ij = (2 rank_ij - 1 - n) / n        mid-rank with ties averaged, in (-1, 1)
       magnitude:  u_ij <- u_ij * range_g(R_j) / range_batch(R_j)        ("range"; "none": skipped)
    2. whitening:  z_i[A] = u_i[A] Sigma_AA^{-1/2}        A = the group's active columns
                   Sigma  = sum_i u_i u_i^T / (N - #groups)   pooled within-group ("batch")
                          = sum_{i in g} u_i u_i^T / (G - 1)  the group's own ("group")
                   Sigma_AA^{-1/2} = V diag(1 / (sqrt(lam) + eps)) V^T over eigenvalues lam > min_eigenvalue
    3. aggregate:  A_i = sum_j w_j z_ij                   w = the reward terms' weights

For a binary column the quantile step is exactly r - mean_g(r) (k successes of n: (n-k)/n and
-k/n), bounded and with no std blow-up on rare successes; with ``covariance: group`` a single binary
reward gives GRPO's group_norm back exactly (z = (r - mean) / (std + eps)). Uncorrelated columns
are only rescaled by the whitening; perfectly correlated (duplicated) columns count sqrt(2) times,
not twice. The result is an advantage (``produces``): the pipeline sends it to the loss in place of
``algorithm.advantage`` (rlpost/pipeline.py); stages that would read it as a reward are refused.

Choices where the abstract is silent:
- "Quantile normalization" is the centred mid-rank quantile within the prompt's group (the
  distribution-free reading: binary, fractional and continuous columns all land in (-1, 1)).
  "Magnitude-aware" rescales it by the group's reward range relative to the column's range over the
  batch, so a group whose rewards barely differ (noise on a continuous reward) gets a small
  allocation instead of full unit-variance advantages as under GRPO.
- The covariance is pooled over the batch by default: a group's G samples are too few to estimate
  R x R correlations, and a per-group covariance would divide the magnitude factor back out.
- "Active reward subspace" of a group: the columns that vary within it (a constant or all-NaN column
  carries no signal and would make Sigma singular); whitening uses Sigma restricted to them, and
  eigen-directions with variance <= ``min_eigenvalue`` are dropped (rank-deficient, e.g. duplicates).
- ZCA (symmetric) whitening, so each whitened column stays aligned with its reward and the term
  weights keep their meaning at aggregation. NaN entries count 0 in their column; a row with every
  term NaN stays NaN (unscorable).
- Metrics: ``rdpo/active_columns`` (mean active columns per group), ``rdpo/offdiag_corr`` (mean
  |correlation| between columns in the pooled Sigma, 0 with one column), ``rdpo/quantile_abs_mean``
  (mean |u| over active entries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from rlpost.combine.base import COMBINERS, Combine
from rlpost.core.schema import Range


def quantiles(x: torch.Tensor) -> torch.Tensor:
    """x [K, G, R] (NaN = missing) -> centred mid-rank quantiles u [K, G, R] in (-1, 1), 0 where missing."""
    valid = ~torch.isnan(x)
    a, b = x.unsqueeze(2), x.unsqueeze(1)  # [K, G, 1, R] vs [K, 1, G, R]
    both = valid.unsqueeze(2) & valid.unsqueeze(1)
    less = ((b < a) & both).sum(2).to(x.dtype)  # valid values below x_i
    ties = ((b == a) & both).sum(2).to(x.dtype)  # valid values equal to x_i (itself included)
    rank = less + (ties + 1) / 2
    n = valid.sum(1, keepdim=True).to(x.dtype)
    u = (2 * rank - 1 - n) / n.clamp(min=1.0)
    return torch.where(valid & (n > 1), u, torch.zeros_like(u))


def whitener(cov: torch.Tensor, eps: float, min_eigenvalue: float) -> torch.Tensor:
    """Sigma [A, A] -> Sigma^{-1/2} [A, A] on the eigen-directions with variance > min_eigenvalue."""
    lam, vec = torch.linalg.eigh(cov.double())
    keep = lam > min_eigenvalue
    inv = torch.where(keep, 1.0 / (lam.clamp(min=0).sqrt() + eps), torch.zeros_like(lam))
    return (vec * inv) @ vec.T


@COMBINERS.register("rdpo")
class RDPO(Combine):
    """Per-group magnitude-aware quantile normalization, Mahalanobis whitening of the active columns, weighted sum."""

    produces = "advantages"
    multi_column = True  # one reward column: nothing to decorrelate (rlpost show warns)
    seed = "seed 004 #22"

    @dataclass(frozen=True)
    class Config:
        magnitude: Literal["range", "none"] = "range"  # scale quantiles by the group's range / the batch's range
        covariance: Literal["batch", "group"] = "batch"  # whitening covariance: pooled within-group, or per group
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to sqrt(eigenvalue) before inverting
        # directions with less variance are outside the active subspace
        min_eigenvalue: Annotated[float, Range(ge=0)] = 1e-6

        def __post_init__(self) -> None:
            if self.magnitude not in ("range", "none"):
                raise ValueError(f"Unknown magnitude {self.magnitude!r}. Valid choices: range, none.")
            if self.covariance not in ("batch", "group"):
                raise ValueError(f"Unknown covariance {self.covariance!r}. Valid choices: batch, group.")
            if self.eps < 0 or self.min_eigenvalue < 0:
                raise ValueError("eps and min_eigenvalue must be >= 0")

    def normalized(self, reward_terms: torch.Tensor, g: int) -> tuple[torch.Tensor, torch.Tensor]:
        """reward_terms [N, R] -> (u [K, G, R] magnitude-aware quantiles, active [K, R] bool)."""
        x = reward_terms.double().view(-1, g, reward_terms.size(1))  # [K, G, R]
        u = quantiles(x)
        hi = x.nan_to_num(-torch.inf).amax(1)
        lo = x.nan_to_num(torch.inf).amin(1)
        group_range = (hi - lo).nan_to_num(0.0).clamp(min=0)  # [K, R]; inf - inf (all NaN) -> 0
        active = group_range > 0
        if self.cfg.magnitude == "range":
            batch_range = (hi.amax(0) - lo.amin(0)).nan_to_num(0.0).clamp(min=0)  # [R]
            factor = torch.where(active, group_range / batch_range.clamp(min=1e-12), torch.zeros_like(group_range))
            u = u * factor.unsqueeze(1)
        return u * active.unsqueeze(1), active

    def __call__(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """reward_terms [N, R], weights [R], G -> group-centred advantages [N] (NaN = unscorable)."""
        cfg, g = self.cfg, num_generations
        u, active = self.normalized(reward_terms, g)
        k, _, r = u.shape
        flat = u.reshape(-1, r)
        pooled = flat.T @ flat / max(flat.size(0) - k, 1)  # [R, R]
        z = torch.zeros_like(u)
        for i in range(k):
            cols = active[i].nonzero().flatten()
            if cols.numel() == 0:
                continue
            ui = u[i][:, cols]  # [G, A]
            cov = ui.T @ ui / max(g - 1, 1) if cfg.covariance == "group" else pooled[cols][:, cols]
            z[i][:, cols] = ui @ whitener(cov, cfg.eps, cfg.min_eigenvalue).to(ui.dtype)
        w = weights.to(z.device, z.dtype)
        advantages = (
            (z * w).sum(-1).reshape(-1).to(reward_terms.dtype if reward_terms.is_floating_point() else torch.float32)
        )
        advantages = advantages.masked_fill(torch.isnan(reward_terms).all(1), float("nan"))
        std = pooled.diagonal().sqrt()
        corr = pooled / (std[:, None] * std[None, :]).clamp(min=1e-12)
        off = corr[~torch.eye(r, dtype=torch.bool)].abs()
        metrics = {
            "rdpo/active_columns": float(active.double().sum(1).mean()),
            "rdpo/offdiag_corr": float(off.mean()) if off.numel() else 0.0,
            "rdpo/quantile_abs_mean": float(u[active.unsqueeze(1).expand_as(u)].abs().mean()) if active.any() else 0.0,
        }
        return advantages, metrics

    def describe(self) -> str:
        c = self.cfg
        return (
            f"A = sum_j w_j z_j, z = Sigma_{c.covariance}^(-1/2) u over the group's active columns, "
            f"u = centred mid-rank quantile per group (magnitude {c.magnitude})"
        )
