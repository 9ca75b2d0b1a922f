"""DAPO batch filters and shaping (seed 000 #23; Yu et al. 2025, arXiv 2503.14476): plain functions.

Not components: the reward-to-advantage pipeline (rlpost/pipeline.py) calls them in its shape
stage (overlong) and keep stage (dynamic sampling) when those are switched on.

- ``zero_variance_groups(rewards [N], G) -> bool [N]``: True on every row of a group whose rewards
  are all equal (all correct or all wrong). Such a group has zero advantage under group
  normalization, so DAPO's dynamic sampling drops it and samples more. Choices: equality is exact
  (rewards are compared as given, no tolerance); NaN (unscorable) rewards are ignored, and a group
  with fewer than two scorable rewards counts as zero-variance (it carries no signal either).
- ``soft_overlong_penalty(lengths [N], max_len, cache_len, factor) -> [N]``: DAPO Eq. 13, the same
  piecewise rule as TRL's ``get_soft_overlong_punishment``, times ``factor``::

      0                                      if L <= max_len - cache_len
      (max_len - cache_len - L) / cache_len  if max_len - cache_len < L <= max_len   (linear, 0 -> -1)
      -1                                     if L > max_len

  so it reaches ``-factor`` at ``L = max_len``. With ``cache_len = 0`` there is no buffer: 0 up to
  and including ``max_len``, ``-factor`` beyond (TRL's behaviour). Returned as float32.
"""

from __future__ import annotations

import torch


def zero_variance_groups(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """rewards [N] (NaN = unscorable), G -> bool [N]: True where the row's group has all-equal rewards."""
    if num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {num_generations}")
    grouped = rewards.reshape(-1, num_generations).float()  # [N/G, G]
    valid = ~torch.isnan(grouped)
    hi = torch.where(valid, grouped, torch.full_like(grouped, -torch.inf)).amax(dim=1)
    lo = torch.where(valid, grouped, torch.full_like(grouped, torch.inf)).amin(dim=1)
    flat = (valid.sum(dim=1) < 2) | (hi == lo)  # [N/G]
    return flat.repeat_interleave(num_generations)


def soft_overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int, factor: float = 1.0) -> torch.Tensor:
    """Completion lengths [N] (int) -> [N] float penalty in [-factor, 0] (DAPO soft overlong punishment)."""
    if max_len < 1 or not 0 <= cache_len <= max_len:
        raise ValueError(
            f"need max_len >= 1 and 0 <= cache_len <= max_len, got max_len={max_len}, cache_len={cache_len}"
        )
    lengths = lengths.to(torch.float32)
    start = max_len - cache_len
    ramp = (start - lengths) / max(cache_len, 1)
    penalty = torch.where(lengths <= start, torch.zeros_like(lengths), torch.where(lengths <= max_len, ramp, -1.0))
    return penalty * factor
