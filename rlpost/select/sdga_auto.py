"""``sdga_auto``: CuSearch's Search-Depth Greedy Allocation, automatic variant (seed 004 #27).

Sample more trajectories than the update uses; the update budget, ``M = round(budget * N)`` of the N
sampled, goes to the deepest searches of the batch::

    depth_i = tool calls of episode i that parsed (rlpost_env_tool_calls - rlpost_env_tool_errors)
    keep    = the M rows of largest depth_i, ties broken uniformly at random

As the policy learns to search deeper, the kept depths rise with the batch's: the "implicit
training-aligned curriculum" of the abstract.

Choices where the abstract is silent:
- Depth counts the tool calls that parsed (a malformed call is no retrieval decision); an episode that
  failed (environment error) has depth 0.
- The budget is a fraction of the sampled batch (``budget: 0.5`` = sample twice what the update uses);
  the selection is batch-level, not per group, as the abstract's "batch-level operator". Advantages are
  computed on every sampled trajectory (the group baselines see the whole group); the dropped rows then
  leave the loss.
- Ties are broken by a seeded random permutation (the seed advances with each batch and is
  checkpointed), so the kept set does not favour the first rows of a batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.select.base import SELECTORS, Selector


def search_depths(rows: list[dict[str, Any]]) -> torch.Tensor:
    """[N] parsed tool calls of each episode (the episode columns of rlpost/envs/runner.py)."""
    if rows and "rlpost_env_tool_calls" not in rows[0]:
        raise ValueError("search depth needs episodes: the rows carry no rlpost_env_tool_calls (set data/env)")
    return torch.tensor(
        [float(r["rlpost_env_tool_calls"] - r["rlpost_env_tool_errors"]) for r in rows], dtype=torch.float32
    )


def allocate(score: torch.Tensor, budget: int, generator: torch.Generator) -> torch.Tensor:
    """score [N], budget M -> keep [N] float: 1.0 on the M rows of highest score, ties uniformly at random."""
    perm = torch.randperm(score.numel(), generator=generator)
    order = perm[torch.argsort(score[perm], descending=True, stable=True)]
    keep = torch.zeros(score.numel(), dtype=torch.float32)
    keep[order[:budget]] = 1.0
    return keep


def budget_of(fraction: float, n: int) -> int:
    """M = round(fraction * N), at least 1."""
    return max(1, round(fraction * n))


def depth_metrics(depth: torch.Tensor, keep: torch.Tensor) -> dict[str, float]:
    return {
        "depth_mean": depth.mean().item(),
        "kept_depth_mean": depth[keep > 0].mean().item(),
        "kept_fraction": keep.mean().item(),
    }


def check_episodes(name: str, run: Any) -> None:
    if run.env is None:
        raise ConfigError(
            f"algorithm/select={name} allocates the update to the deepest searches, which it counts in each "
            "episode's tool calls: set data/env (e.g. data/env=search reward=env)."
        )


@SELECTORS.register("sdga_auto")
class SdgaAuto(Selector):
    """Keep the round(budget * N) deepest searches of the batch (SDGA-Auto)."""

    stateful = True  # the tie-breaking seed advances per batch (rlpost/runs/state.py)

    @dataclass(frozen=True)
    class Config:
        # fraction of the sampled trajectories the update uses (0.5: sample twice the budget)
        budget: Annotated[float, Range(gt=0, le=1)] = 0.5
        seed: Annotated[int, Range(ge=0)] = 0  # seed of the tie-breaking permutation

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.batches = 0

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        depth = search_depths(batch.rows)  # [N]
        generator = torch.Generator().manual_seed(self.cfg.seed + self.batches)
        self.batches += 1
        keep = allocate(depth, budget_of(self.cfg.budget, depth.numel()), generator)
        return keep.to(batch.rewards.device), depth_metrics(depth, keep)

    def check_run(self, run: Any) -> None:
        check_episodes("sdga_auto", run)

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = int(state["batches"])

    def describe(self) -> str:
        return f"sdga_auto: the {self.cfg.budget:g} x N deepest searches (parsed tool calls) are in the update"
