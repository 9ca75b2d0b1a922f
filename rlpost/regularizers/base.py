"""The regularizer base class and its registry: extra per-token loss terms added before aggregation."""

from __future__ import annotations

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.core.component import Component
from rlpost.core.registry import Registry
from rlpost.losses.base import LossInputs


class Regularizer(Component):
    """Returns a per-token term ``[B, T]`` (already multiplied by its coefficient) and metrics.

    Optional members: ``prepare`` (below); ``sampler``, ``check_run``, ``describe``, ...: ``Component``.
    """

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """One micro-batch -> per-token term [B, T] (or [B, 1]) and float metrics."""
        raise NotImplementedError

    def prepare(self, batch: GroupBatch) -> dict[str, torch.Tensor]:
        """At scoring time, on the whole gathered generation batch: per-completion tensors ``[N]`` that the
        trainer slices to this process and puts into the loss batch under their keys (``{}``: none)."""
        return {}


REGULARIZERS: Registry[Regularizer] = Registry("regularizer", Regularizer)
