"""A disjoint linear UCB bandit (LinUCB, Li et al. 2010) and RAIL's context features (seed 000 #8).

One ridge regression per arm a over d context features::

    A_a = ridge * I + sum_t x_t x_t^T      [d, d]    (updated with every context x_t where a was played)
    b_a = sum_t r_t x_t                    [d]       (r_t: the improvement the intervention caused)
    theta_a = A_a^-1 b_a                   [d]
    ucb_a(x) = theta_a . x + alpha * sqrt(x^T A_a^-1 x)

``choose(x)`` plays argmax_a ucb_a(x) (ties: the lowest arm index). A deterministic rule: every process
holding the same state picks the same arm, and a resumed run continues exactly (no sampler state).
"""

from __future__ import annotations

import statistics
from typing import Any

import torch


def context(probe_rewards: list[float], probe_texts: list[str], prompt: str, length_scale: float) -> list[float]:
    """Probe rewards [p], probe completions [p], prompt text -> x [5]: bias 1, the probe's mean reward, its
    population std, the prompt's length and the probe's mean completion length (characters / length_scale).
    Unscorable (NaN) probe rewards are left out; with none, mean and std are 0."""
    scored = [r for r in probe_rewards if r == r]
    mean = sum(scored) / len(scored) if scored else 0.0
    std = statistics.pstdev(scored) if len(scored) > 1 else 0.0
    length = sum(map(len, probe_texts)) / max(len(probe_texts), 1)
    return [1.0, mean, std, len(prompt) / length_scale, length / length_scale]


DIM = 5  # len(context(...))


class LinUCB:
    """Disjoint LinUCB over ``arms`` with d features (module docstring)."""

    def __init__(self, arms: list[str], dim: int, alpha: float, ridge: float):
        self.arms, self.alpha = list(arms), alpha
        self.A = torch.eye(dim, dtype=torch.float64).repeat(len(arms), 1, 1) * ridge  # [K, d, d]
        self.b = torch.zeros(len(arms), dim, dtype=torch.float64)  # [K, d]
        self.counts = [0] * len(arms)  # updates per arm
        self.gain_sums = [0.0] * len(arms)  # sum of observed improvements per arm

    def scores(self, x: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
        """x [d] -> (predicted improvement theta_a . x [K], UCB [K])."""
        v = torch.tensor(x, dtype=torch.float64)
        inv = torch.linalg.inv(self.A)  # [K, d, d]
        theta = (inv @ self.b.unsqueeze(-1)).squeeze(-1)  # [K, d]
        mean = theta @ v
        width = torch.einsum("d,kde,e->k", v, inv, v).clamp(min=0).sqrt()
        return mean, mean + self.alpha * width

    def choose(self, x: list[float]) -> str:
        ucb = self.scores(x)[1]
        return self.arms[int(torch.argmax(ucb))]  # torch.argmax returns the first maximum

    def update(self, arm: str, x: list[float], gain: float) -> None:
        k, v = self.arms.index(arm), torch.tensor(x, dtype=torch.float64)
        self.A[k] += torch.outer(v, v)
        self.b[k] += gain * v
        self.counts[k] += 1
        self.gain_sums[k] += gain

    def state_dict(self) -> dict[str, Any]:
        return {"arms": list(self.arms), "A": self.A.clone(), "b": self.b.clone(), "counts": list(self.counts),
                "gain_sums": list(self.gain_sums)}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["arms"]) != self.arms:
            raise ValueError(f"saved bandit arms {state['arms']} differ from the configured {self.arms}")
        self.A, self.b = state["A"].clone().double(), state["b"].clone().double()
        self.counts, self.gain_sums = list(state["counts"]), list(state["gain_sums"])
