"""``air``: Anchor Invariance Regularization (seed 004 #14), a policy-gradient pull of open-ended
variants toward the performance of their intent's verifiable anchors.

Data: each row carries an intent id and a variant kind, ``anchor`` (verifiable, e.g. multiple
choice) or ``open`` (open-ended rewording, scored by a noisier proxy). ``sampler`` (see
``air_sampler.py``) puts the variants of one intent into the same generation batch.

Objective, per intent k of a generation batch and per open variant p of k (a prompt, G completions)::

    target_k = sg( mean of the combined rewards of all anchor completions of k )    stop-gradient
    J_p      = E_{y ~ pi(.|x_p)} r(y)      estimated by m_p = mean_i r_i over the G completions of p
    gap_p    = target_k - m_p              (one_sided: max(0, target_k - m_p))
    L_AIR    = coef * sum_p phi(gap_p)     phi = gap^2 / 2 ("squared") or |gap| ("linear")

Its gradient is ``-coef * phi'(gap_p) * grad J_p`` (the target is a constant), and ``grad J_p`` is
estimated with the group-mean baseline as GRPO does, ``mean_i (r_i - m_p)/(s_p + eps) grad log pi``
(``s_p`` the unbiased std of p's rewards; ``scale: none`` drops it). So each completion gets a weight
and the per-token term ``[B, T]`` is a policy-gradient surrogate::

    w_i      = phi'(gap_p) * (r_i - m_p) / (s_p + eps)    open completions of anchored intents; else 0
    term_i,t = -coef * w_i * exp(logps_i,t - old_logps_i,t)

i.e. an extra, unclipped advantage ``coef * w_i`` on open-ended completions only, aggregated like the
policy loss. ``phi'`` is ``gap`` (squared) or ``1[gap > 0]`` (linear, one-sided; ``sign(gap)`` two-sided).

Why this reading (the abstract says only "a stop-gradient target regularizes the open-ended variants
toward the anchor performance"): performance is the expected reward, which is not differentiable in
the samples, so the regularizer must act through a score-function gradient. Two tempting
shortcuts are wrong: ``-coef * max(0, target - r_i) * logp`` raises the likelihood of exactly the
open completions that fell short of the target, and ``-coef * (r_i - target) * logp`` only uses the
target as a baseline, whose expected gradient does not depend on it (no pull at all). The gap must
weight a centered policy gradient, and it is per variant: each rewording should match the anchor.

Choices:
- Anchors get exactly 0 (never pulled, in either direction: the stop-gradient target); the policy
  loss still trains them. With ``one_sided`` (default) open variants already at or above the target
  get 0 too; ``one_sided: false`` also pulls them down toward it (a symmetric invariance on the open side).
- Empty anchor set: an intent with no anchor completion in the batch (or only unscorable NaN anchor
  rewards) gives its open completions weight 0. All-equal rewards within an open variant give 0
  (no gradient estimate), as do NaN rewards. ``target`` uses the combined reward (after ``combine``).
- The target pools every anchor completion of the intent (several anchor prompts allowed); rows with
  the same intent id belong together wherever they sit in the batch.
- The ratio is unclipped (``coef`` bounds the term); with ``num_iterations = 1`` it is 1 in value and
  the gradient is ``grad log pi``. The AIR term counts under the same loss mask (dynamic sampling,
  overlong filter) as the policy loss.
Metrics (per micro-batch, 0 when no row qualifies): ``open_frac`` (open rows), ``anchored_frac`` (open
rows whose intent has a target), ``gap`` (mean signed gap over anchored open rows), ``weight_abs``
(mean |w| over rows), ``term_abs`` (masked token mean of |term|).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.group_norm import nanstd
from rlpost.core.schema import Range
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import AIR_ANCHORED, AIR_GAP, AIR_OPEN, AIR_WEIGHT, LossInputs
from rlpost.regularizers.air_sampler import IntentBatchSampler
from rlpost.regularizers.base import REGULARIZERS, Regularizer

KEYS = (AIR_WEIGHT, AIR_GAP, AIR_OPEN, AIR_ANCHORED)  # the [N] tensors prepare() returns (rlpost/losses/base.py)


@REGULARIZERS.register("air")
class AIR(Regularizer):
    """Anchor Invariance Regularization: open-ended variants pulled toward their anchors' reward (stop-grad)."""

    seed = "seed 004 #14"

    @dataclass(frozen=True)
    class Config:
        # weight of the AIR term (an extra advantage coef * w on open-ended completions)
        coef: Annotated[float, Range(ge=0)] = 0.5
        one_sided: bool = True  # pull only open variants below the anchor target (never pull anything down)
        penalty: Literal["squared", "linear"] = "squared"  # phi(gap): gap^2/2 (weight = gap) or |gap| (weight 1)
        scale: Literal["group", "none"] = "group"  # divide r - m_p by the open variant's reward std (GRPO scale)
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to that std before dividing
        intent_column: str = "intent_id"  # dataset column with the intent id
        variant_column: str = "variant"  # dataset column with the variant kind
        anchor_value: str = "anchor"  # variant value of verifiable anchors
        open_value: str = "open"  # variant value of open-ended variants

        def __post_init__(self):
            if self.coef < 0:
                raise ValueError(f"coef must be >= 0, got {self.coef}")
            if self.penalty not in ("squared", "linear"):
                raise ValueError(f"Unknown penalty {self.penalty!r}. Valid choices: squared, linear.")
            if self.scale not in ("group", "none"):
                raise ValueError(f"Unknown scale {self.scale!r}. Valid choices: group, none.")
            if self.anchor_value == self.open_value:
                raise ValueError("anchor_value and open_value must differ")

    def is_anchor(self, value: Any, where: str) -> bool:
        if value == self.cfg.anchor_value:
            return True
        if value == self.cfg.open_value:
            return False
        raise ValueError(
            f"regularizer 'air': {where} has {self.cfg.variant_column}={value!r}; "
            f"expected {self.cfg.anchor_value!r} or {self.cfg.open_value!r}"
        )

    # ---- scoring time: the whole gathered generation batch ---------------------------------
    def prepare(self, batch: GroupBatch) -> dict[str, torch.Tensor]:
        """rewards [N], rows [N] (intent, variant), G -> per-completion tensors [N] under ``KEYS``."""
        cfg, rewards, g = self.cfg, batch.rewards.detach().float().cpu(), batch.num_generations
        n, rows = rewards.numel(), batch.rows
        if len(rows) != n or any(k not in rows[0] for k in (cfg.intent_column, cfg.variant_column)):
            have = sorted(rows[0]) if rows else []
            raise KeyError(
                f"regularizer 'air' needs the columns {cfg.intent_column!r} and {cfg.variant_column!r} in the row "
                f"of each of the {n} completions; got {len(rows)} rows with columns {have}"
            )
        intents = [row[cfg.intent_column] for row in rows]
        anchor = torch.tensor([self.is_anchor(row[cfg.variant_column], f"row {i}") for i, row in enumerate(rows)])
        for first in range(0, n, g):
            if len({(intents[i], bool(anchor[i])) for i in range(first, first + g)}) > 1:
                raise ValueError(
                    f"regularizer 'air': completions {first}..{first + g - 1} share a prompt, not an intent"
                )
        targets = {}  # intent -> sg(mean anchor reward); intents without a scorable anchor are absent
        for intent in set(intents):
            values = rewards[[i for i in range(n) if intents[i] == intent and anchor[i]]]
            if torch.isfinite(values).any():
                targets[intent] = values[torch.isfinite(values)].mean()

        grouped = batch.grouped(rewards)  # [N/G, G]
        mean = torch.nanmean(grouped, dim=1, keepdim=True)  # m_p
        centered = grouped - mean
        if cfg.scale == "group":
            centered = centered / (nanstd(grouped, dim=1).unsqueeze(1) + cfg.eps)
        centered = torch.nan_to_num(centered.reshape(n), nan=0.0)  # NaN reward or std (< 2 scorable) -> 0

        gap, anchored = torch.zeros(n), torch.zeros(n)
        for p, first in enumerate(range(0, n, g)):
            if not anchor[first] and intents[first] in targets:
                gap[first : first + g] = torch.nan_to_num(targets[intents[first]] - mean[p, 0], nan=0.0)
                anchored[first : first + g] = 1.0
        pull = gap.clamp(min=0.0) if cfg.one_sided else gap
        weight = (pull if cfg.penalty == "squared" else torch.sign(pull)) * centered * anchored
        out = {AIR_WEIGHT: weight, AIR_GAP: gap, AIR_OPEN: (~anchor).float(), AIR_ANCHORED: anchored}
        return {key: value.to(batch.rewards.device) for key, value in out.items()}

    # ---- loss time: one micro-batch -------------------------------------------------------
    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps [B, T], batch["air_weight"] [B] -> term -coef * w * ratio [B, T], metrics."""
        if AIR_WEIGHT not in x.batch:
            raise ValueError(
                "regularizer 'air' needs batch['air_weight'] from its prepare() hook; the trainer must call "
                "regularizer.prepare(group_batch) at scoring time (RLPostTrainer does)"
            )
        weight = x.batch[AIR_WEIGHT].to(x.logps.dtype).unsqueeze(1)  # [B, 1]
        ratio = torch.exp(x.logps - x.old_logps)
        term = -self.cfg.coef * weight * ratio
        is_open = x.batch[AIR_OPEN].float()
        anchored = x.batch[AIR_ANCHORED].float() * is_open
        metrics = {
            "open_frac": is_open.mean().item(),
            "anchored_frac": (anchored.sum() / is_open.sum()).item() if is_open.sum() > 0 else 0.0,
            "gap": (x.batch[AIR_GAP] * anchored).sum().item() / anchored.sum().item() if anchored.sum() > 0 else 0.0,
            "weight_abs": weight.abs().mean().item(),
            "term_abs": masked_metric_mean(term.detach().abs(), x.mask),
        }
        return term, metrics

    # ---- data order: whole intents per generation batch -----------------------------------
    def sampler(
        self,
        dataset: Any,
        *,
        generation_batch_prompts: int,
        num_generations: int,
        seed: int,
        repeat_count: int = 1,
        shuffle: bool = True,
    ) -> IntentBatchSampler:
        """A TRL-RepeatSampler-compatible sampler whose generation batches hold whole intents."""
        cfg = self.cfg
        missing = [c for c in (cfg.intent_column, cfg.variant_column) if c not in dataset.column_names]
        if missing:
            raise ValueError(f"regularizer 'air' needs the dataset columns {missing}; columns: {dataset.column_names}")
        variants = dataset[cfg.variant_column]
        return IntentBatchSampler(
            intents=dataset[cfg.intent_column],
            is_anchor=[self.is_anchor(v, f"dataset row {i}") for i, v in enumerate(variants)],
            prompts_per_batch=generation_batch_prompts,
            mini_repeat_count=num_generations,
            repeat_count=repeat_count,
            shuffle=shuffle,
            seed=seed,
        )

    def describe(self) -> str:
        side = "max(0, target - m_p)" if self.cfg.one_sided else "target - m_p"
        return (
            f"-{self.cfg.coef:g} * w * ratio on open-ended completions only, w = phi'({side}) * (r - m_p)"
            f"{' / std' if self.cfg.scale == 'group' else ''}, target = sg(mean anchor reward of the intent)"
        )
