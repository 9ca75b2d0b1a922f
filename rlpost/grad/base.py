"""The gradient-transform base class and its registry (applied just before gradient clipping)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlpost.core.component import Component
from rlpost.core.registry import Registry

if TYPE_CHECKING:
    from rlpost.core.config import HardwareConfig


class GradTransform(Component):
    """Modifies ``p.grad`` of the named trainable parameters in place; returns metrics.

    Optional members: ``check_compatible`` (below); ``check_run``, ``describe``, ``state_dict``, ...: ``Component``.
    """

    def __call__(self, named_params: list[tuple[str, torch.nn.Parameter]], step: int) -> dict[str, float]:
        """Named parameters with gradients, the optimizer step -> float metrics (``p.grad`` changed in place)."""
        raise NotImplementedError

    def check_compatible(self, hardware: HardwareConfig) -> None:
        """Raise ``ConfigError`` for a hardware profile this transform cannot run on (build.check_run)."""


GRAD_TRANSFORMS: Registry[GradTransform] = Registry("grad", GradTransform)
