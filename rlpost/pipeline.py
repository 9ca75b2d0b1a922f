"""Reward to advantage as one pure pipeline: tensors in, a typed result out, no trainer and no model.

Stage 3 of the path of one batch (docs/architecture.md), in six steps:

    reward terms [N, R]
     3.1 combine    reward.combine (rlpost/combine/): terms and weights -> task Rewards [N]
     3.2 adjust     the rollout strategy's adjust_rewards (rlpost/rollouts/), training batches only:
                    Rewards -> Rewards
     3.3 whiten     algorithm.safety.reward_whitening (rlpost/safety/whiten.py): Rewards -> Rewards
     3.4 shape      + DAPO's soft overlong penalty, - KL in the reward (kl.placement=reward),
                    -KL as each token's own reward (kl.placement=token, PPO's GAE reads it): Rewards -> Rewards
     3.5 advantage  algorithm.advantage (rlpost/advantages/) on a GroupBatch: Rewards -> Advantages [N] or [N, T]
     3.6 keep       dynamic sampling: groups whose *task* rewards are all equal leave the loss;
                    algorithm.select (rlpost/select/): which trajectories the update budget goes to
    -> PipelineResult(rewards, task_rewards, advantages, keep, extras, metrics)

Rewards (what to maximise, steps 3.1-3.4) and advantages (what the loss pushes on, step 3.5) are
different types, so no step takes one for the other. A combine that returns advantages (odrpo,
rdpo, decoupled: ``Combine.produces``) *is* step 3.5: a relative rollout adjustment (step 3.2) runs on
each reward term before it, its ``score`` is the task reward (logged, read by regularizers), its
output goes to the loss as the advantages, and steps 3.3-3.4 and any advantage but a group baseline are
refused before a model loads (``rlpost/combine/base.py``); dynamic sampling then drops the groups
whose advantages are all equal. N = completions of the generation batch over all processes; rows
``g*G .. g*G+G-1`` share a prompt. The trainer (rlpost/trainer/scoring.py) gathers the inputs, runs
``run_pipeline`` and hands each process its slice; held-out evaluation (rlpost/evaluation/evaluate.py) uses
``RewardParts.scored``, so ``eval/reward`` is the training reward.

Choices: dynamic sampling reads the task reward (after whitening, before shaping), so shaping
(overlong, KL) cannot make a solved group look informative; the KL reward penalty is detached.

Activity figures (issue 48, rlpost/core/activity.py), training batches only, put into ``metrics`` under
``active/<kind>/<name>`` (logged as they are, not under ``rlpost/``), each computed by its kind's base from what
the step already produced: ``combine`` (step 3.1), ``rollout`` (step 3.2), ``shape/overlong`` (step 3.4: the
share of rows with a non-zero soft overlong penalty), ``advantage`` (step 3.5), ``keep/dynamic_sampling`` (the
share of rows dynamic sampling drops) and ``select`` (step 3.6). A component that is the plain GRPO path reports none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from rlpost.advantages.base import Estimate, GroupBatch, advantage_metrics
from rlpost.core.activity import PREFIX, put_figure, share
from rlpost.losses.kl import kl_estimate, kl_reward_penalty

if TYPE_CHECKING:
    from rlpost.run import AlgorithmParts, RewardParts


# PPO's per-token KL penalty keeps the name its docs and runs use, beside TRL's own ``kl`` (not rlpost/...)
UNPREFIXED_METRICS = frozenset({"kl/token_penalty_sum_mean"})


def unprefixed(name: str) -> bool:
    """A pipeline metric logged under its own name (``UNPREFIXED_METRICS``, every ``active/`` figure), not rlpost/."""
    return name in UNPREFIXED_METRICS or name.startswith(PREFIX)


@dataclass(frozen=True)
class Rewards:
    """Scores to maximise, one per completion: ``values`` [N] (NaN = unscorable)."""

    values: torch.Tensor


@dataclass(frozen=True)
class Advantages:
    """How hard the loss pushes each completion (``values`` [N]) or each of its tokens ([N, T]) up."""

    values: torch.Tensor


@dataclass
class PipelineInputs:
    """One generation batch, gathered over processes (padded to the longest completion T)."""

    reward_terms: torch.Tensor  # [N, R] every term, unweighted
    num_generations: int  # G
    completion_ids: torch.Tensor  # [N, T]
    completion_mask: torch.Tensor  # [N, T] 1.0 on completion tokens
    loss_mask: torch.Tensor  # [N, T] the tokens that count (tool output excluded)
    lengths: torch.Tensor  # [N] completion tokens the policy generated
    max_completion_length: int
    training: bool
    rows: list[dict[str, Any]] = field(default_factory=list)  # [N] dataset rows
    completions: list = field(default_factory=list)  # [N] decoded completions (for adjust_rewards)
    kinds: list[str] | None = None  # [N] the rollout strategy's kind per row (None: plain sampling)
    policy_logps: torch.Tensor | None = None  # [N, T] rollout policy log-probs (KL shaping)
    ref_logps: torch.Tensor | None = None  # [N, T] reference log-probs (KL shaping)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # [N, T] statistics components asked for
    token_text: list[list[str]] = field(default_factory=list)  # [N][T] decoded tokens (requires token_text)


@dataclass
class PipelineResult:
    rewards: Rewards  # [N] after shaping: what the advantage saw
    task_rewards: Rewards  # [N] after combine, adjust and whitening, before shaping
    advantages: Advantages  # [N] or [N, T]
    keep: torch.Tensor  # [N] float: 0 on rows dynamic sampling drops from the loss
    extras: dict[str, torch.Tensor]  # the advantage's by-products, e.g. GAE's returns [N, T]
    metrics: dict[str, float]  # logged under rlpost/<name>, except UNPREFIXED_METRICS
    batch: GroupBatch  # what the advantage read (regularizers' ``prepare`` reads it too)


def run_pipeline(x: PipelineInputs, reward: RewardParts, algo: AlgorithmParts) -> PipelineResult:
    """Steps 3.1-3.6 (module docstring) on one gathered generation batch."""
    if reward.combine.produces == "advantages":
        return combined_advantages(x, reward, algo)
    task, metrics = combine_rewards(reward, x.reward_terms, x.num_generations)
    if x.training:
        metrics["varied_reward_columns"] = varied_columns(x.reward_terms, x.num_generations)
        figure = reward.combine.activity(x.reward_terms, reward.weights, x.num_generations, task.values)
        put_figure(metrics, "combine", reward.combine.registry_name, figure)
    task = adjust_rewards(task, x, algo, metrics)
    task = Rewards(algo.safety.on_rewards(task.values, metrics, x.training))  # whitening (off by default)
    rewards, token_rewards = shape_rewards(task, x, algo, metrics)
    extras = dict(x.extras)
    if token_rewards is not None:
        extras["token_rewards"] = token_rewards
    batch = group_batch(x, reward, rewards, extras)
    estimate = algo.advantage.estimate(batch)
    metrics.update(estimate.metrics)
    if x.training:
        put_figure(
            metrics, "advantage", algo.advantage.registry_name, algo.advantage.activity(batch, estimate.advantages)
        )
    return finish(x, algo, rewards, task, estimate, batch, metrics, signal=task.values)


def combined_advantages(x: PipelineInputs, reward: RewardParts, algo: AlgorithmParts) -> PipelineResult:
    """Steps 3.1-3.6 for a combine that returns advantages: adjust each term, combine into Advantages, keep."""
    metrics: dict[str, float] = {}
    if x.training:
        metrics["varied_reward_columns"] = varied_columns(x.reward_terms, x.num_generations)
    terms = adjust_terms(x, reward.names, algo, metrics)
    task = Rewards(reward.combine.score(terms, reward.weights.to(terms.device)))
    values, combine_metrics = reward.combined(terms, x.num_generations)
    metrics.update(combine_metrics)
    if x.training:
        figure = reward.combine.activity(terms, reward.weights, x.num_generations, values)
        put_figure(metrics, "combine", reward.combine.registry_name, figure)
    advantages = values.nan_to_num(0.0)  # an unscorable row (NaN in every term) is pushed neither way
    estimate = Estimate(advantages, advantage_metrics(advantages))
    metrics.update(estimate.metrics)
    batch = group_batch(x, reward, task, dict(x.extras))
    return finish(x, algo, task, task, estimate, batch, metrics, signal=values)


def group_batch(x: PipelineInputs, reward: RewardParts, rewards: Rewards, extras: dict) -> GroupBatch:
    """What the advantage (and the regularizers' ``prepare``) read about the batch."""
    return GroupBatch(
        rewards=rewards.values,
        reward_terms=x.reward_terms,
        term_names=reward.names,
        num_generations=x.num_generations,
        completion_mask=x.loss_mask,  # the tokens that count: an episode's observations and tool output are not trained
        completion_ids=x.completion_ids,
        rows=x.rows,
        extras=extras,
        token_text=x.token_text,
    )


def finish(
    x: PipelineInputs,
    algo: AlgorithmParts,
    rewards: Rewards,
    task: Rewards,
    estimate: Estimate,
    batch: GroupBatch,
    metrics: dict[str, float],
    signal: torch.Tensor,
) -> PipelineResult:
    """Step 3.6 and the result: dynamic sampling drops the groups whose ``signal`` [N] is all equal."""
    keep = torch.ones_like(rewards.values)
    if algo.dynamic_sampling and x.training:
        keep = (~zero_variance_groups(signal, x.num_generations)).float()
        metrics["dynamic_sampling/kept_fraction"] = keep.mean().item()
        put_figure(metrics, "keep", "dynamic_sampling", share(keep < 0.5))
    if x.training and type(algo.select).registry_name != "none":  # the update budget (e.g. CuSearch's SDGA)
        selected, select_metrics = algo.select(batch)
        keep = keep * selected.to(keep)
        metrics.update({f"select/{k}": v for k, v in select_metrics.items()})
        put_figure(metrics, "select", algo.select.registry_name, algo.select.activity(selected))
    metrics["reward"] = torch.nanmean(rewards.values).item()
    return PipelineResult(rewards, task, Advantages(estimate.advantages), keep, estimate.extras, metrics, batch)


def combine_rewards(reward: RewardParts, terms: torch.Tensor, num_generations: int) -> tuple[Rewards, dict]:
    """Step 3.1: reward terms [N, R] -> task rewards [N] with the run's combiner and weights."""
    values, metrics = reward.combined(terms, num_generations)
    return Rewards(values), metrics


def adjust_terms(x: PipelineInputs, names: list[str], algo: AlgorithmParts, metrics: dict) -> torch.Tensor:
    """Step 3.2 before a combine that returns advantages: a relative rollout adjustment (``reward_adjustment``)
    on each reward term column [N] of ``x.reward_terms`` [N, R]; its metrics carry the term's name."""
    terms = x.reward_terms
    if x.kinds is None or not x.training or type(algo.rollout).reward_adjustment == "none":
        return terms
    columns = []
    for j, name in enumerate(names):
        extra: dict[str, float] = {}
        columns.append(adjust_rewards(Rewards(terms[:, j]), x, algo, extra, figure=False).values)
        metrics.update({f"{k}/{name}": value for k, value in extra.items()})
    adjusted = torch.stack(columns, dim=1)
    put_figure(metrics, "rollout", algo.rollout.registry_name, algo.rollout.activity(x.kinds, terms, adjusted))
    return adjusted


def adjust_rewards(
    task: Rewards, x: PipelineInputs, algo: AlgorithmParts, metrics: dict, figure: bool = True
) -> Rewards:
    """Step 3.2: the rollout strategy rewrites the rewards of the rows it shaped (training batches only); with
    ``figure`` its activity figure too (``adjust_terms`` reports one for all the columns)."""
    if x.kinds is None or not x.training:
        return task
    for kind in sorted(set(x.kinds)):  # what each kind of row scored before the strategy rewrites it
        rows = torch.tensor([k == kind for k in x.kinds], device=task.values.device)
        metrics[f"rollout/{kind}_reward"] = torch.nanmean(task.values[rows]).item()
    values, extra = algo.rollout.adjust_rewards(task.values, x.kinds, x.rows, x.completions, x.num_generations)
    metrics.update(extra)
    if figure:
        put_figure(metrics, "rollout", algo.rollout.registry_name, algo.rollout.activity(x.kinds, task.values, values))
    return Rewards(values)


def shape_rewards(
    task: Rewards, x: PipelineInputs, algo: AlgorithmParts, metrics: dict
) -> tuple[Rewards, torch.Tensor | None]:
    """Step 3.4: task rewards + overlong penalty - KL penalty -> rewards [N]; with kl.placement=token also
    the per-token rewards ``-coef * KL_t`` [N, T] that GAE adds to the last token's score."""
    shaping = torch.zeros_like(task.values)
    if algo.overlong.soft_penalty:
        penalty = soft_overlong_penalty(
            x.lengths, x.max_completion_length, algo.overlong.cache_len, algo.overlong.factor
        ).to(shaping)
        shaping = shaping + penalty
        metrics["overlong/penalty_mean"] = penalty.mean().item()
        if x.training:
            put_figure(metrics, "shape", "overlong", share(penalty != 0))
    kl, token_rewards = algo.kl, None
    if kl.coef > 0 and kl.placement == "reward":
        penalty = kl_reward_penalty(x.policy_logps, x.ref_logps, x.loss_mask, kl.coef, kl.estimator)
        shaping = shaping - penalty.to(shaping)
        metrics["kl/reward_penalty_mean"] = penalty.mean().item()
    if kl.coef > 0 and kl.placement == "token":
        with torch.no_grad():
            penalty = kl.coef * kl_estimate(x.policy_logps, x.ref_logps, kl.estimator) * x.loss_mask  # [N, T]
        token_rewards = -penalty
        metrics["kl/token_penalty_sum_mean"] = penalty.sum(-1).mean().item()
    return Rewards(task.values + shaping), token_rewards


# DAPO's batch filter and shaping (seed 000 #23; Yu et al. 2025, arXiv 2503.14476): plain functions, not
# components, called by the shape step (overlong) and the keep step (dynamic sampling) when switched on.
#
# - ``zero_variance_groups(rewards [N], G) -> bool [N]``: True on every row of a group whose rewards
#   are all equal (all correct or all wrong). Such a group has zero advantage under group
#   normalization, so DAPO's dynamic sampling drops it and samples more. Choices: equality is exact
#   (rewards are compared as given, no tolerance); NaN (unscorable) rewards are ignored, and a group
#   with fewer than two scorable rewards counts as zero-variance (it carries no signal either).
# - ``soft_overlong_penalty(lengths [N], max_len, cache_len, factor) -> [N]``: DAPO Eq. 13, the same
#   piecewise rule as TRL's ``get_soft_overlong_punishment``, times ``factor``::
#
#       0                                      if L <= max_len - cache_len
#       (max_len - cache_len - L) / cache_len  if max_len - cache_len < L <= max_len   (linear, 0 -> -1)
#       -1                                     if L > max_len
#
#   so it reaches ``-factor`` at ``L = max_len``. With ``cache_len = 0`` there is no buffer: 0 up to
#   and including ``max_len``, ``-factor`` beyond (TRL's behaviour). Returned as float32.


def varied_columns(reward_terms: torch.Tensor, num_generations: int) -> float:
    """reward terms [N, R], G -> how many columns vary within at least one group (``varied_reward_columns``: the
    evidence for "one active reward column" when a combine of several stays inert, rlpost/analysis/inert.py)."""
    return float(
        sum(
            not bool(zero_variance_groups(reward_terms[:, j], num_generations).all())
            for j in range(reward_terms.size(1))
        )
    )


def zero_variance_groups(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """rewards [N] (NaN = unscorable), G -> bool [N]: True where the row's group has all-equal rewards."""
    if num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {num_generations}")
    grouped = rewards.reshape(-1, num_generations).float()  # [N/G, G]
    valid = ~torch.isnan(grouped)
    hi = torch.where(valid, grouped, torch.full_like(grouped, -torch.inf)).amax(dim=1)
    lo = torch.where(valid, grouped, torch.full_like(grouped, torch.inf)).amin(dim=1)
    flat = (valid.sum(dim=1) < 2) | (hi == lo)  # [N/G]
    return flat.repeat_interleave(num_generations)


def soft_overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int, factor: float = 1.0) -> torch.Tensor:
    """Completion lengths [N] (int) -> [N] float penalty in [-factor, 0] (DAPO soft overlong punishment)."""
    if max_len < 1 or not 0 <= cache_len <= max_len:
        raise ValueError(
            f"need max_len >= 1 and 0 <= cache_len <= max_len, got max_len={max_len}, cache_len={cache_len}"
        )
    lengths = lengths.to(torch.float32)
    start = max_len - cache_len
    ramp = (start - lengths) / max(cache_len, 1)
    penalty = torch.where(lengths <= start, torch.zeros_like(lengths), torch.where(lengths <= max_len, ramp, -1.0))
    return penalty * factor
