"""The policy-loss base class, its registry, and the inputs every loss reads.

A loss returns a per-token loss ``[B, T]`` (or ``[B, 1]``, broadcast over tokens); the trainer adds
the regularizers and then applies exactly one aggregation (see ``aggregation.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from rlpost.core.component import Component
from rlpost.core.registry import Registry


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(frozen=True)
class LossContext:
    """Where a micro-batch sits in training, for components that keep state across micro-batches (adaptive
    coefficients) or need the other processes' tokens (a quantile over the batch). The trainer's loss seam
    fills it; the defaults describe one process evaluating one micro-batch (nothing accumulates)."""

    training: bool = False  # a training micro-batch (evaluation must not move a controller's state)
    grad_accum: int = 1  # micro-batches per optimizer step (1 in eval)
    step_end: bool = True  # the last micro-batch of an optimizer step (accelerate's sync_gradients)
    num_processes: int = 1  # data-parallel processes whose gradients are averaged
    gather: Callable[[torch.Tensor], torch.Tensor] = _same  # 1-D values -> concatenated over processes (any lengths)
    all_sum: Callable[[torch.Tensor], torch.Tensor] = _same  # a tensor -> its sum over processes


@dataclass
class LossInputs:
    """One micro-batch of B completions, T completion tokens."""

    logps: torch.Tensor  # [B, T] log pi_theta of the sampled tokens (requires grad)
    old_logps: torch.Tensor  # [B, T] log-probs of the policy that produced the rollout (detached)
    advantages: torch.Tensor  # [B, 1] or [B, T]
    mask: torch.Tensor  # [B, T] 1.0 on tokens that count
    entropies: torch.Tensor | None = None  # [B, T] token entropy of pi_theta
    ref_logps: torch.Tensor | None = None  # [B, T] reference-model log-probs
    batch: dict[str, Any] = field(default_factory=dict)  # the whole trainer batch, for extra fields
    # [B, T] 0/1: the tokens the policy loss trains, set by the trainer from the regularizers' ``policy_mask``
    # (e.g. top_entropy); None = every token of ``mask``. Never part of the aggregation's normalizer.
    policy_mask: torch.Tensor | None = None
    context: LossContext = field(default_factory=LossContext)  # where this micro-batch sits in training

    @property
    def trained_mask(self) -> torch.Tensor:
        """[B, T] ``mask`` times ``policy_mask``: the tokens whose policy loss counts."""
        return self.mask if self.policy_mask is None else self.mask * self.policy_mask.to(self.mask.dtype)

    def masked_mean(self, x: torch.Tensor) -> float:
        """Token-mean of ``x`` ([B, T] or [B, 1]) over the mask, as a float for logging."""
        x = x.expand_as(self.mask)
        return float((x * self.mask).sum() / self.mask.sum().clamp(min=1.0))


class PolicyLoss(Component):
    """Per-token policy loss and float metrics (already reduced, for logging).

    Optional members (``score_rollouts`` for inputs from another model, ``check_run``, ``describe``,
    ...): ``Component``.
    """

    # True when the loss reads the batch's ``importance_sampling_ratio`` (vLLM's IS ratio, REGEN's replay
    # weights) itself (VESPO folds it into its sequence weight); the trainer then does not multiply by it
    folds_importance_ratio: ClassVar[bool] = False

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """One micro-batch -> per-token loss [B, T] (or [B, 1]) and float metrics."""
        raise NotImplementedError


LOSSES: Registry[PolicyLoss] = Registry("loss", PolicyLoss)
