"""The gradient-transform Protocol and its registry (applied in ``on_pre_optimizer_step``)."""

from __future__ import annotations

from typing import Protocol

import torch

from rlpost.registry import Registry


class GradTransform(Protocol):
    """Modifies ``p.grad`` of the named trainable parameters in place; returns metrics."""

    Config: type

    def __call__(self, named_params: list[tuple[str, torch.nn.Parameter]], step: int) -> dict[str, float]: ...


GRAD_TRANSFORMS: Registry[GradTransform] = Registry("grad")
