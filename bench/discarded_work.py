"""What TRL computes per step that rlpost then recomputes or overwrites, timed (docs/architecture.md).

Inside ``GRPOTrainer._generate_and_score_completions`` (trl 1.16.0), after the reward columns are
gathered, TRL sums them with its weights, normalises the sum per group into advantages, and logs
``reward``, ``reward_std`` and ``frac_reward_zero_std`` of that sum. rlpost's pipeline
(rlpost/pipeline.py) computes the run's own rewards and advantages instead, replaces
``output["advantages"]`` and rewrites those three logged values (rlpost/trainer/scoring.py). Avoiding
TRL's block would mean replacing TRL's whole method (about 300 lines) with a copy, so it stays; this
script measures what it costs.

Method: the same tensor operations on the same shapes, stated here in plain torch (a weighted
``nansum`` over ``[N, R]``, per-group ``nanmean`` and unbiased ``nanstd`` over ``[N/G, G]`` with
``repeat_interleave`` back to ``[N]``, the normalisation, ``isclose`` for the zero-std flag, and the
three logged reductions with ``.item()``), timed as the median of ``--reps`` runs after a warm-up,
with one torch thread (as a small op runs in a training step on this machine).

Usage: .venv/bin/python bench/discarded_work.py [--rows 16] [--group 8] [--terms 1] [--reps 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def nanstd(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Unbiased std ignoring NaN (rlpost/advantages/group_norm.py has the same)."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True) * count / (count - 1).clamp(min=1)
    return var.sqrt().squeeze(dim)


def discarded_block(terms: torch.Tensor, weights: torch.Tensor, group: int) -> tuple[float, float, float]:
    """The reductions TRL runs on the gathered reward matrix ``terms`` [N, R] whose results rlpost replaces."""
    unscorable = torch.isnan(terms).all(dim=1)
    rewards = (terms * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    mean = torch.nanmean(rewards.view(-1, group), dim=1).repeat_interleave(group)
    std = nanstd(rewards.view(-1, group), dim=1).repeat_interleave(group)
    advantages = torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)
    zero_std = torch.isclose(std, torch.zeros_like(std))
    del advantages  # replaced by rlpost's pipeline
    return torch.nanmean(rewards).item(), nanstd(rewards).item(), zero_std.float().mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=16, help="completions per generation batch (N)")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--terms", type=int, default=1, help="reward terms (R)")
    parser.add_argument("--reps", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    terms, weights = torch.rand(args.rows, args.terms), torch.ones(args.terms)
    for _ in range(50):
        discarded_block(terms, weights, args.group)
    times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        discarded_block(terms, weights, args.group)
        times.append(time.perf_counter() - start)
    ms = statistics.median(times) * 1e3
    print(f"N={args.rows} G={args.group} R={args.terms}: TRL's discarded reward/advantage block {ms:.3f} ms per step")
    print(f"  of a 4.1 s demo step (make train, bench/RESULTS.md): {ms / 4100 * 100:.4f}%")


if __name__ == "__main__":
    main()
