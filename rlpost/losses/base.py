"""The policy-loss base class, its registry, and the inputs every loss reads.

A loss returns a per-token loss ``[B, T]`` (or ``[B, 1]``, broadcast over tokens); the trainer adds
the regularizers and then applies exactly one aggregation (see ``aggregation.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from rlpost.core.component import Component
from rlpost.core.registry import Registry


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
