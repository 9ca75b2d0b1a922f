"""The correction base class, its registry, and the inputs every correction reads.

A correction turns the log-probs of the rollout tokens under the *training* policy
(``train_logps``: the fp32 trainer at generation time) and under the *behaviour* policy that
actually sampled them (``behaviour_logps``: a bf16 rollout copy, vLLM, or a peer model) into a
per-token multiplier of the policy loss ``[N, T]`` (or ``[N, 1]`` for a whole sequence). The
trainer applies it exactly where TRL applies its own ``importance_sampling_ratio`` (after the
policy loss, before KL and regularizers), as a constant (no gradient through the weight).

Every correction's ``Config`` extends ``CorrectionSettings``: where the behaviour policy comes
from (``rollout_precision``) is part of the correction node, so ``algorithm/correction=X``
replaces both at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

from rlpost.core.activity import changed, share
from rlpost.core.component import Component
from rlpost.core.registry import Registry

if TYPE_CHECKING:
    from rlpost.models.loading import ModelConfig


@dataclass(frozen=True)
class CorrectionSettings:
    """The rollout side every correction shares."""

    # null: rollouts from the policy itself (TRL's generation; vLLM when hardware.use_vllm)
    # fp32 | bf16: rollouts from a copy of the policy in that dtype, synced from the policy before each generation
    # fp8: a bf16 copy whose Linear layers compute in fake FP8 e4m3 (rlpost/models/fake_fp8.py), an FP8 engine
    rollout_precision: Literal["fp32", "bf16", "fp8"] | None = None


@dataclass
class CorrectionInputs:
    """One generation batch of N completions over all processes, T completion tokens."""

    train_logps: torch.Tensor  # [N, T] log pi_train(y_t) at generation time (detached)
    behaviour_logps: torch.Tensor  # [N, T] log pi_behaviour(y_t) of the policy that sampled y
    mask: torch.Tensor  # [N, T] 1.0 on completion tokens that count
    advantages: torch.Tensor  # [N, 1] or [N, T]
    peer: torch.Tensor  # [N] bool: sampled by a peer model rather than the policy (or its copy)
    training: bool = True  # False on evaluation batches: stateful corrections do not update

    @property
    def log_ratio(self) -> torch.Tensor:
        """[N, T] log(pi_train / pi_behaviour), 0 on masked-out tokens."""
        return (self.train_logps - self.behaviour_logps) * self.mask


class Correction(Component):
    """Per-token loss weights from the train/behaviour log-probs, and float metrics.

    Optional members: ``peer`` / ``peer_per_group``, ``activity`` (below); ``check_run``, ``describe``,
    ``state_dict``, ...: ``Component``.
    """

    @dataclass(frozen=True)
    class Config(CorrectionSettings):
        """Only the rollout side (a correction with settings extends ``CorrectionSettings``)."""

    cfg: Any  # a CorrectionSettings subclass: each correction's own Config (Component.cfg)
    # a second model that samples some completions of every group (f_tis); None: only the policy samples
    peer: ModelConfig | None = None
    peer_per_group: int = 0  # completions per group the peer samples (0 without a peer)

    def __call__(self, x: CorrectionInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """Train/behaviour log-probs [N, T] -> loss weights [N, T] or [N, 1], and float metrics."""
        raise NotImplementedError

    def activity(self, x: CorrectionInputs, weights: torch.Tensor) -> float | None:
        """``active/correction/<name>`` of one training generation batch (rlpost/core/activity.py). The no-op is
        weight 1: the figure is the share of counted tokens (of counted sequences for [N, 1] weights) whose weight
        differs from 1 beyond the tolerance. Read from the weights the trainer already has."""
        flags = changed(weights, torch.ones_like(weights))
        if weights.size(1) == 1:  # a weight per sequence: the sequences with a counted token
            return share(flags[:, 0], (x.mask.sum(dim=1) > 0).float())
        return share(flags, x.mask)


CORRECTIONS: Registry[Correction] = Registry("correction", Correction)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scalar mean of ``x`` ([N, T] or [N, 1], broadcast) over ``mask`` [N, T]."""
    x = x.expand_as(mask)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def sequence_log_ratio(x: CorrectionInputs) -> torch.Tensor:
    """[N, 1] sum_t log(pi_train / pi_behaviour) over the counted tokens: the log of the sequence ratio."""
    return x.log_ratio.sum(dim=1, keepdim=True)


def weight_metrics(weights: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean / min / max of the weights over the counted tokens (sequences for [N, 1] weights)."""
    rows = mask.sum(dim=1) > 0
    flat = weights[rows].flatten() if weights.size(1) == 1 else weights[mask.bool()]
    if flat.numel() == 0:
        return {"weight_mean": 1.0, "weight_min": 1.0, "weight_max": 1.0}
    return {
        "weight_mean": masked_mean(weights, mask).item(),
        "weight_min": flat.min().item(),
        "weight_max": flat.max().item(),
    }


def fraction(flags: torch.Tensor, mask: torch.Tensor) -> float:
    """Share of counted tokens (or counted sequences, for [N, 1] flags) where ``flags`` is true."""
    if flags.size(1) == 1:
        rows = mask.sum(dim=1) > 0
        return flags[rows].float().mean().item() if rows.any() else 0.0
    return masked_mean(flags.float(), mask).item()
