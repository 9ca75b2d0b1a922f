"""``sdga_phase``: CuSearch's Search-Depth Greedy Allocation, phased variant (seed 004 #27).

A curriculum threshold tau on search depth (``sdga_auto.py`` defines depth and the budget M). Each batch::

    keep    = the M rows with depth >= tau first (at random among them), then rows below tau at random
    advance : tau <- tau + 1 when #(depth >= tau + 1) >= abundance * M

so the threshold moves up only once deeper trajectories are abundant enough to fill the budget, the
"explicitly advances the curriculum threshold" of the abstract; Auto instead always takes the deepest.

Choices where the abstract is silent: tau starts at ``start_depth`` (1: at least one retrieval), rises by
one at a time, is checked after each batch's selection (so it acts from the next batch) and never falls;
``abundance`` (1.0: enough deeper rows to fill the whole budget) is the advance rule's constant; tau and the
tie-breaking seed are checkpointed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.core.schema import Range
from rlpost.select.base import SELECTORS, Selector
from rlpost.select.sdga_auto import allocate, budget_of, check_episodes, depth_metrics, search_depths


@SELECTORS.register("sdga_phase")
class SdgaPhase(Selector):
    """Prefer searches at least tau deep; raise tau when deeper ones fill the budget (SDGA-Phase)."""

    stateful = True  # tau and the tie-breaking seed travel with every checkpoint (rlpost/runs/state.py)

    @dataclass(frozen=True)
    class Config:
        # fraction of the sampled trajectories the update uses (0.5: sample twice the budget)
        budget: Annotated[float, Range(gt=0, le=1)] = 0.5
        start_depth: Annotated[int, Range(ge=0)] = 1  # tau at the start of training
        # tau advances once #(depth >= tau + 1) >= abundance * budget rows
        abundance: Annotated[float, Range(gt=0)] = 1.0
        seed: Annotated[int, Range(ge=0)] = 0  # seed of the tie-breaking permutation

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.threshold = cfg.start_depth
        self.batches = 0

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        depth = search_depths(batch.rows)  # [N]
        budget = budget_of(self.cfg.budget, depth.numel())
        generator = torch.Generator().manual_seed(self.cfg.seed + self.batches)
        self.batches += 1
        keep = allocate((depth >= self.threshold).float(), budget, generator)
        metrics = {**depth_metrics(depth, keep), "threshold": float(self.threshold)}
        if (depth >= self.threshold + 1).sum().item() >= self.cfg.abundance * budget:
            self.threshold += 1
        return keep.to(batch.rewards.device), metrics

    def check_run(self, run: Any) -> None:
        check_episodes("sdga_phase", run)

    def state_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.threshold, self.batches = int(state["threshold"]), int(state["batches"])

    def describe(self) -> str:
        return (
            f"sdga_phase: {self.cfg.budget:g} x N searches, those at least tau deep first (tau from "
            f"{self.cfg.start_depth}, +1 once {self.cfg.abundance:g} x budget are deeper)"
        )
