"""Reward whitening (seed 000 #16, first layer of its three-layer safety mechanism).

The combined task reward of every completion is standardized by running statistics over the whole
run (all completions of all steps so far, this batch included)::

    n' = n + m,  delta = mean_b - mean
    mean' = mean + delta * m / n'                              (Chan et al. parallel update)
    M2'   = M2 + M2_b + delta^2 * n * m / n'
    var'  = M2' / n'        (population variance)
    r_w   = (r - mean') / (sqrt(var') + eps)                   [N]

Choices where the abstract is silent:
- the statistics are updated with the batch *before* it is whitened (so the first batch is
  standardized by its own mean/std, and a constant first batch becomes 0);
- the task reward (after ``reward.combine``) is whitened; reward shaping (overlong penalty, KL in
  the reward) is added afterwards, so ``kl.coef`` keeps its scale relative to a unit-variance reward;
- NaN rewards (a term that abstained) are left NaN and do not enter the statistics;
- with group-normalized advantages (GRPO, GEPO) a global affine map of the rewards cancels within
  each group; whitening matters for unnormalized baselines (Dr. GRPO, RLOO), PPO's critic, and the
  scale of reward-placed KL;
- the state (count, mean, M2) travels with every checkpoint (``rlpost/runs/state.py``).
Metrics: ``safety/reward_running_mean``, ``safety/reward_running_std``.
"""

from __future__ import annotations

import math

import torch


class RunningMoments:
    """Count, mean and sum of squared deviations of every finite value seen (float64 on the CPU)."""

    def __init__(self):
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, values: torch.Tensor) -> None:
        """values: any shape; NaN/inf entries are skipped."""
        v = values.detach().double().flatten().cpu()
        v = v[torch.isfinite(v)]
        m = v.numel()
        if m == 0:
            return
        batch_mean = v.mean().item()
        batch_m2 = ((v - batch_mean) ** 2).sum().item()
        n = self.count
        delta = batch_mean - self.mean
        total = n + m
        self.mean += delta * m / total
        self.m2 += batch_m2 + delta * delta * n * m / total
        self.count = total

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count else 0.0

    def state_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict) -> None:
        self.count, self.mean, self.m2 = int(state["count"]), float(state["mean"]), float(state["m2"])


class RewardWhitener:
    """Standardize rewards by the run's running mean/std (see the module docstring)."""

    def __init__(self, eps: float):
        self.eps = eps
        self.moments = RunningMoments()

    def __call__(self, rewards: torch.Tensor, update: bool = True) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N] (gathered over processes, same on every rank) -> whitened [N], metrics.

        ``update=False`` (evaluation batches) whitens with the statistics as they are."""
        if update:
            self.moments.update(rewards)
        if self.moments.count == 0:  # nothing seen yet (an evaluation before training): leave as is
            return rewards, {}
        mean, std = self.moments.mean, self.moments.std
        whitened = (rewards - mean) / (std + self.eps)
        return whitened, {"safety/reward_running_mean": mean, "safety/reward_running_std": std}

    def state_dict(self) -> dict:
        return self.moments.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.moments.load_state_dict(state)
