"""The policy-loss base class, its registry, the inputs every loss reads, and the keys of the loss batch.

A loss returns a per-token loss ``[B, T]`` (or ``[B, 1]``, broadcast over tokens); the trainer adds
the regularizers and then applies exactly one aggregation (see ``aggregation.py``).

The loss batch (``LossInputs.batch``) is TRL's output dict of ``_generate_and_score_completions``
(``TRL_LOSS_BATCH_KEYS``) plus the keys rlpost adds at scoring time: every one of them is declared once
in ``LOSS_BATCH_KEYS`` below, and producers (the trainer, ``score_rollouts``, ``Regularizer.prepare``,
PPO, UG-TTT) and consumers (losses, regularizers, ``loss_term``) use these constants. The loss seam
refuses a batch holding any other key (``undeclared_keys``), so a new key is declared here or fails loudly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from rlpost.core.activity import changed, share
from rlpost.core.component import Component
from rlpost.core.registry import Registry

GRPO_EPSILON = 0.2  # the clip range of the plain GRPO path (TRL's epsilon): the no-op of a loss's activity figure


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

    Optional members: ``activity`` (below); ``score_rollouts`` for inputs from another model, ``check_run``,
    ``describe``, ...: ``Component``.
    """

    # True when the loss reads the batch's ``importance_sampling_ratio`` (vLLM's IS ratio, REGEN's replay
    # weights) itself (VESPO folds it into its sequence weight); the trainer then does not multiply by it
    folds_importance_ratio: ClassVar[bool] = False

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """One micro-batch -> per-token loss [B, T] (or [B, 1]) and float metrics."""
        raise NotImplementedError

    def activity(self, x: LossInputs, loss: torch.Tensor) -> float | None:
        """``active/loss/<name>`` of one training micro-batch (rlpost/core/activity.py): the share of counted tokens
        (``x.mask``) whose gradient coefficient ``d(sum_t m_t loss_t)/d log pi_t`` differs from the clipped
        surrogate's at the same inputs (``clip_gradient``: GRPO's loss at epsilon 0.2), up to one positive factor
        for the micro-batch (``scale_free``). The gradient, not the value, is compared: losses that equal GRPO's in
        gradient but not in value (-A log pi against -A r at ratio 1) change nothing. It is one extra
        ``autograd.grad`` from the loss to the log-probs, which never reaches the model (no forward pass); a
        sequence-level loss [B, 1] counts once per token, as the aggregation counts it. None: not a training
        micro-batch (no gradient), or the loss is GRPO's own (``clip`` at 0.2/0.2)."""
        if not (torch.is_grad_enabled() and x.logps.requires_grad and loss.requires_grad):
            return None
        mask = x.mask.to(x.logps.dtype)
        total = (loss.expand_as(mask) * mask).sum()
        (grad,) = torch.autograd.grad(total, x.logps, retain_graph=True, allow_unused=True)
        grad = torch.zeros_like(x.logps) if grad is None else grad
        return share(changed(grad, clip_gradient(x), mask, scale_free=True), mask)

    def on_policy_figure(self) -> float | None:
        """``activity`` on a fixed small on-policy micro-batch (every ratio 1: log pi = log pi_old), four rows of
        mixed-sign advantages and uneven lengths: 0.0 when this loss's gradient there is the clipped surrogate's,
        None when it reports nothing or cannot be probed without inputs from the run (OPD's teacher log-probs)."""
        gen = torch.Generator().manual_seed(0)
        logps = (-3.0 * torch.rand(4, 6, generator=gen)).requires_grad_()
        mask = torch.ones(4, 6)
        mask[1, 4:], mask[3, 2:] = 0.0, 0.0
        x = LossInputs(
            logps=logps,
            old_logps=logps.detach(),
            advantages=torch.tensor([[1.0], [-1.0], [0.5], [-0.25]]),
            mask=mask,
            entropies=torch.rand(4, 6, generator=gen),
            ref_logps=logps.detach(),
        )
        with torch.enable_grad():
            try:
                loss, _ = self(x)
            except (KeyError, ValueError, RuntimeError, TypeError):  # needs a batch key or a model
                return None
            return self.activity(x, loss)

    def config_warnings(self, run: Any) -> list[str]:
        """On a run whose every ratio is 1 (``every_ratio_is_one``), a loss whose gradient at ratio 1 is the clipped
        surrogate's (``on_policy_figure`` 0: gspo, cispo, gmpo, clip_higher, ...) cannot act."""
        if not every_ratio_is_one(run) or self.on_policy_figure() != 0.0:
            return []
        return [
            f"algorithm/loss={self.registry_name}: at ratio pi/pi_old = 1 its gradient is GRPO's clipped surrogate's, "
            "and every ratio of this run is 1 (train.num_iterations=1, train.minibatches=1, rollouts from the policy "
            "itself): it cannot act and its activity figure will stay 0. Set train.num_iterations=2 (or more), or "
            "train.minibatches=2."
        ]

    def inert_reason(self, rows: list[dict[str, Any]], run: Any) -> str | None:
        """Every ratio was 1 (``every_ratio_is_one``) and this loss equals the clipped surrogate there."""
        if every_ratio_is_one(run) and self.on_policy_figure() == 0.0:
            return (
                "every ratio pi/pi_old was 1 (one pass over each batch, train.num_iterations=1, rollouts from the "
                "policy itself), where this loss's gradient is the clipped surrogate's"
            )
        return None


def every_ratio_is_one(run: Any) -> bool:
    """In this run (a ``BuiltRun``) the loss only ever sees pi/pi_old = 1: one pass and one optimizer step per
    generation batch, rollouts from the policy itself (no lower-precision copy, no vLLM, no peer, no replays)."""
    train, algo = run.settings.train, run.algorithm
    return (
        train.num_iterations == 1
        and train.minibatches == 1
        and algo.correction.cfg.rollout_precision is None
        and algo.correction.peer is None
        and not run.hardware.use_vllm
        and algo.offline is None
    )


def clip_gradient(x: LossInputs, epsilon: float = GRPO_EPSILON) -> torch.Tensor:
    """[B, T] the gradient of GRPO's clipped surrogate ``-min(r A, clip(r, 1 - eps, 1 + eps) A)`` with respect to
    log pi of each token: ``-A r`` where the clip leaves the token, 0 where it holds it (A > 0 and r > 1 + eps,
    or A < 0 and r < 1 - eps). From tensors the loss already has: no forward pass."""
    with torch.no_grad():
        ratio = torch.exp(x.logps - x.old_logps)
        advantages = x.advantages if x.advantages.dim() == 2 else x.advantages.unsqueeze(1)
        held = ((advantages > 0) & (ratio > 1 + epsilon)) | ((advantages < 0) & (ratio < 1 - epsilon))
        return torch.where(held, torch.zeros_like(ratio), -advantages * ratio)


LOSSES: Registry[PolicyLoss] = Registry("loss", PolicyLoss)

# ---- the loss batch's keys ----------------------------------------------------------------------------
# TRL 1.16.0's output of GRPOTrainer._generate_and_score_completions (tests/trainer/test_trl_contract.py pins it)
TRL_LOSS_BATCH_KEYS = frozenset(
    {
        "prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch",
        "old_per_token_logps", "importance_sampling_ratio", "sampling_per_token_logps", "ref_per_token_logps",
        "pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "image_sizes", "token_type_ids",
        "mm_token_type_ids", "image_position_ids", "num_images", "num_tiles", "tool_mask",
    }
)  # fmt: skip

# what rlpost adds (B = this process's completions, T = completion tokens), by who adds it
KEEP = "rlpost_keep"  # trainer (scoring.py)
REWARDS = "rlpost_rewards"  # trainer (scoring.py)
NUM_TOKENS = "rlpost_num_tokens"  # trainer (scoring.py, refill.py)
IS_WEIGHT = "rlpost_is_weight"  # trainer (corrections.py)
TEACHER_LOGPS = "rlpost_teacher_logps"  # loss opd (score_rollouts)
COMPLEXITY = "rlpost_complexity"  # loss adaptive_clip (score_rollouts)
AIR_WEIGHT, AIR_GAP, AIR_OPEN, AIR_ANCHORED = "air_weight", "air_gap", "air_open", "air_anchored"  # regularizer air
GUIDED = "rlpost_guided"  # rollout rubric_guidance (score_rollouts)
LANGUAGE_PREF = "rlpost_language_pref"  # rollout language_routed (score_rollouts)
HINDSIGHT_TEACHER_LOGPS = "rlpost_hindsight_teacher_logps"  # rollout hindsight_critique (score_rollouts)
HINDSIGHT_WEIGHT = "rlpost_hindsight_weight"  # rollout hindsight_critique (score_rollouts)
RETURNS = "rlpost_returns"  # algorithm ppo (algorithms/ppo.py)
OLD_VALUES = "rlpost_old_values"  # algorithm ppo
ADAPTER = "rlpost_adapter"  # algorithm ug_ttt (algorithms/ug_ttt.py)

LOSS_BATCH_KEYS: dict[str, str] = {  # key -> what it holds
    KEEP: "[B] float: 0 on rows dynamic sampling drops from the loss",
    REWARDS: "[B] the reward the advantage saw (after shaping; NaN = unscorable)",
    NUM_TOKENS: "scalar: loss tokens of the whole generation batch over all processes (the token normalizer)",
    IS_WEIGHT: "[B, T] or [B, 1] the correction's per-token loss weights (algorithm/correction)",
    TEACHER_LOGPS: "[B, T] log pi_teacher of the sampled tokens (OPD)",
    COMPLEXITY: "[B] character complexity c in [0, 1] (adaptive_clip)",
    AIR_WEIGHT: "[B] AIR's per-completion weight",
    AIR_GAP: "[B] AIR's reward gap to the intent's anchor",
    AIR_OPEN: "[B] 1.0 on AIR's open (non-anchor) variants",
    AIR_ANCHORED: "[B] 1.0 where the anchor of the row's intent was in the batch",
    GUIDED: "[B] aux_coef on the kept privileged rows, else 0 (rubric_guidance)",
    LANGUAGE_PREF: "[B] preference sign s in {-1, 0, +1} (language_routed)",
    HINDSIGHT_TEACHER_LOGPS: "[B, T] log pi_old(z_t | c) on retry rows, 0 elsewhere (hindsight_critique)",
    HINDSIGHT_WEIGHT: "[B] opd_coef on retry rows, else 0 (hindsight_critique)",
    RETURNS: "[B, T] GAE's value targets (PPO)",
    OLD_VALUES: "[B, T] the critic's values at rollout time (PPO)",
    ADAPTER: "[B] the LoRA adapter that sampled each row (UG-TTT)",
}


def undeclared_keys(batch: dict[str, Any]) -> list[str]:
    """The keys of a loss batch that neither TRL's output nor ``LOSS_BATCH_KEYS`` declares (sorted)."""
    return sorted(set(batch) - TRL_LOSS_BATCH_KEYS - set(LOSS_BATCH_KEYS))
