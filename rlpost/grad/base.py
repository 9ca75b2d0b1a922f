"""The gradient-transform base class and its registry (applied just before gradient clipping)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from rlpost.core.activity import RTOL
from rlpost.core.component import Component
from rlpost.core.registry import Registry

if TYPE_CHECKING:
    from rlpost.core.config import HardwareConfig


class GradTransform(Component):
    """Modifies ``p.grad`` of the named trainable parameters in place; returns metrics.

    Optional members: ``check_compatible``, ``measures_only``, ``activity`` (below); ``check_run``, ``describe``,
    ``state_dict``, ...: ``Component``.
    """

    # a monitor that only measures (direction_monitor): p.grad is never changed, so it has no activity figure
    measures_only: ClassVar[bool] = False

    def __call__(self, named_params: list[tuple[str, torch.nn.Parameter]], step: int) -> dict[str, float]:
        """Named parameters with gradients, the optimizer step -> float metrics (``p.grad`` changed in place)."""
        raise NotImplementedError

    def check_compatible(self, hardware: HardwareConfig) -> None:
        """Raise ``ConfigError`` for a hardware profile this transform cannot run on (build.check_run)."""

    def apply(
        self, named_params: list[tuple[str, torch.nn.Parameter]], step: int
    ) -> tuple[dict[str, float], float | None]:
        """What the trainer calls (rlpost/trainer/loss.py, stage 6): ``self(named_params, step)`` and its activity
        figure. The gradients are copied first (one copy of them, freed right after) unless ``measures_only``."""
        if self.measures_only:
            return self(named_params, step), None
        before = [p.grad.detach().clone() for _, p in named_params if p.grad is not None]
        metrics = self(named_params, step)
        return metrics, self.activity(before, [p.grad for _, p in named_params if p.grad is not None])

    def activity(self, before: list[torch.Tensor], after: list[torch.Tensor]) -> float | None:
        """``active/grad/<name>`` of one optimizer step (rlpost/core/activity.py). The no-op is the identity, and a
        share of parameters would say little about a projection: the figure is the relative size of the change,
        ``||g' - g|| / ||g||`` over all trainable gradients (``before`` = g, ``after`` = g', in the same order),
        capped at 1; a change below RTOL of the gradient's norm reads 0 (float noise of an in-place rewrite), as does
        a zero gradient."""
        change2 = total2 = 0.0
        for g, h in zip(before, after):
            total2 += float(torch.linalg.vector_norm(g.float())) ** 2
            change2 += float(torch.linalg.vector_norm(h.float() - g.float())) ** 2
        if total2 == 0.0:
            return 0.0
        ratio = (change2 / total2) ** 0.5
        return 0.0 if ratio <= RTOL else min(ratio, 1.0)


GRAD_TRANSFORMS: Registry[GradTransform] = Registry("grad", GradTransform)
