"""The regularizer Protocol and its registry: extra per-token loss terms added before aggregation."""

from __future__ import annotations

from typing import Protocol

import torch

from rlpost.losses.base import LossInputs
from rlpost.registry import Registry


class Regularizer(Protocol):
    """Returns a per-token term ``[B, T]`` (already multiplied by its coefficient) and metrics."""

    Config: type

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]: ...


REGULARIZERS: Registry[Regularizer] = Registry("regularizer")
