"""``none``: every sampled trajectory is in the update (the default ``algorithm/select``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.select.base import SELECTORS, Selector


@SELECTORS.register("none")
class KeepAll(Selector):
    """No selection: keep [N] is all ones."""

    @dataclass(frozen=True)
    class Config:
        pass

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        return torch.ones_like(batch.rewards, dtype=torch.float32), {}

    def activity(self, keep: torch.Tensor) -> float | None:
        """None: keeping every row is the no-op itself."""
        return None

    def describe(self) -> str:
        return "none: every sampled trajectory is in the update"
