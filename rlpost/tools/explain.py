"""``rlpost show``: the composed run explained in plain language (batch arithmetic, formulas), and warnings for
settings visible from the config alone under which a method cannot act (``BuiltRun.config_warnings``: its activity
figure, rlpost/core/activity.py, would stay 0 for the whole run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlpost.launch.plan import describe_hardware
from rlpost.losses.aggregation import describe_aggregation
from rlpost.models.critic import describe_critic
from rlpost.models.lora_ensemble import describe_ensemble
from rlpost.run import BuiltRun
from rlpost.runs.trackers import describe as describe_trackers

if TYPE_CHECKING:
    from rlpost.core.component import Component
    from rlpost.core.config import TrainSettings
    from rlpost.corrections.base import Correction


def _describe(component: Component) -> str:
    return component.describe()  # a component without its own describe(): its docstring's first line


def _rollout_source(correction: Correction, staleness: int) -> str:
    precision, peer = correction.cfg.rollout_precision, correction.peer
    source = f"a {precision} copy of the policy, synced before each generation" if precision else "the policy itself"
    if peer is not None:
        source += f"; {correction.peer_per_group} per group from peer {peer.display_name}"
    if staleness:
        source += f"; trained {staleness} step{'s' if staleness > 1 else ''} after generation (train.staleness)"
    return source + " (train-inference mismatch logged as mismatch/*)"


def _describe_staleness(train: TrainSettings) -> str:
    """train.staleness > 0 in one line (rlpost/trainer/staleness.py)."""
    k, s = train.staleness, "s" if train.staleness > 1 else ""
    anchor = "the policy that trains it" if train.staleness_anchor == "current" else "the generating policy (mu)"
    return (
        f"{k}: step t trains on the batch generated {k} step{s} earlier, by the policy after max(0, t-{k + 1}) "
        f"updates (lag min({k}, t-1) steps, logged as staleness/lag; {k} batch{'es' if k > 1 else ''} of the initial "
        f"policy {'are' if k > 1 else 'is'} generated before step 1); its rewards, advantages and behaviour log-probs are those of "
        f"generation time; PPO ratio against {anchor}"
    )


def explain(run: BuiltRun) -> str:
    """A short report of what one optimizer step of this run does."""
    p, train, algo, reward = run.plan, run.settings.train, run.algorithm, run.reward
    lines = [
        f"Algorithm {algo.name} on {run.model.name or run.model.source} ({run.hardware.name}, {run.hardware.precision}).",
        "",
        "Batch per optimizer step:",
        f"  prompts per step        {p.prompts_per_step}  (completions_per_step / num_generations)",
        f"  completions per prompt  {p.num_generations}  (G, one group)",
        f"  completions per step    {p.completions_per_step}  over {p.world_size} process(es)",
        f"  micro-batch             {p.micro_batch_size} completions per forward/backward",
        f"  gradient accumulation   {p.grad_accum} micro-batch(es) per step",
        f"  completion tokens       at most {p.max_tokens_per_step} per step ({train.max_completion_length} per completion)",
        f"  passes over each batch  {train.num_iterations}",
        f"  mini-batches            {train.minibatches} optimizer step(s) per generation batch and pass "
        f"({train.minibatches * p.completions_per_step} completions generated at once)",
        *([f"  staleness               {_describe_staleness(train)}"] if train.staleness else []),
        f"  rollouts                {type(algo.rollout).registry_name}: {_describe(algo.rollout)}",
        f"  steps                   {train.steps} at learning rate {train.learning_rate:g} ({train.lr_scheduler})",
        *(
            [
                "",
                f"Data mixture (data=mixture, {len(run.mixture.sources)} sources; groups never mix sources):",
                *run.mixture.describe_lines(p.prompts_per_step * train.minibatches),
            ]
            if run.mixture is not None
            else []
        ),  # fmt: skip
        *(
            [
                "",
                f"Episodes (data/env={run.env.registry_name or 'of each source'}):",
                *run.env.episode_lines(
                    train.max_completion_length, run.reward.failure[0].on_failure if run.reward.failure else "skip"
                ),
            ]
            if run.env is not None
            else []
        ),  # fmt: skip
        "",
        "Hardware:",
        *describe_hardware(run.hardware, p),  # scale-out (rlpost/launch/plan.py)
        "",
        "Reward:",
    ]
    for name, weight in zip(reward.names, reward.weights.tolist()):
        lines.append(f"  {weight:g} x {name}")
    if run.mixture is not None:
        lines.append("  each <source>/<term> scores its source's rows only (NaN, not applicable, on the others)")
    lines.append(f"  combined by {type(reward.combine).registry_name}")
    if algo.overlong.soft_penalty:
        lines.append(
            f"  + soft overlong punishment over the last {algo.overlong.cache_len} tokens (up to -{algo.overlong.factor:g})"
        )
    if algo.kl.coef > 0 and algo.kl.placement == "reward":
        lines.append(f"  - {algo.kl.coef:g} x sum_t KL_{algo.kl.estimator}(pi || ref) (KL in the reward)")
    if algo.kl.coef > 0 and algo.kl.placement == "token":
        lines.append(f"  - {algo.kl.coef:g} x KL_{algo.kl.estimator}(pi || ref) as each token's own reward (PPO)")
    if reward.combine.produces == "advantages":  # the combine is the advantage step (rlpost/combine/base.py)
        combine = type(reward.combine).registry_name
        advantage = f"  {_describe(reward.combine)}: from reward.combine={combine}, which replaces "
        advantage += f"algorithm.advantage={type(algo.advantage).registry_name}; the logged reward is its score"
    else:
        advantage = f"  {_describe(algo.advantage)}"
    lines += ["", "Advantage:", advantage]
    if algo.dynamic_sampling:
        signal = "advantages" if reward.combine.produces == "advantages" else "rewards"
        lines.append(f"  groups with all-equal {signal} are dropped from the loss (dynamic sampling)")
        if algo.max_refill_rounds:
            lines.append(
                f"  then up to {algo.max_refill_rounds} more generation batches of fresh prompts refill them (DAPO)"
            )
    if type(algo.select).registry_name != "none":  # the update budget (rlpost/select/)
        lines.append(f"  update: {_describe(algo.select)}")
    lines += ["", "Loss per token:", f"  {_describe(algo.loss)}"]
    if algo.correction.registry_name != "none" or algo.correction.cfg.rollout_precision is not None:
        lines.append(f"  x correction {_describe(algo.correction)}")
        lines.append(f"    rollouts: {_rollout_source(algo.correction, train.staleness)}")
    for name, regularizer in algo.regularizers:  # KL in the loss is the first, when it is on
        lines.append(f"  + {_describe(regularizer)}" if name == "kl" else f"  + {name}: {_describe(regularizer)}")
    if algo.offline is not None:  # algorithm=regen: batches from recorded replays
        cap, count = algo.offline.config.is_cap, len(algo.offline.paths)
        lines.append(f"  x min(pi_old / mu, {cap:g}) per token: truncated IS vs the behaviour of {count} replay(s)")
    for name, transform in algo.grad:  # in the order they apply
        lines.append(f"  gradients before clipping, {name}: {_describe(transform)}")
    if algo.overlong.filter:
        lines.append("  truncated completions (no EOS) are excluded")
    if algo.critic is not None:
        lines += ["", "Critic:", f"  {describe_critic(algo.critic, train.learning_rate)}"]
    if algo.ensemble is not None:  # UG-TTT (rlpost/algorithms/ug_ttt.py)
        lines += ["", "Ensemble:", f"  {describe_ensemble(algo.ensemble)}"]
    lines += ["", "Aggregation:", f"  {algo.aggregation}: {describe_aggregation(algo.aggregation)}"]
    if algo.safety.cfg.any:  # the stability kit (rlpost/safety/)
        lines += ["", "Safety:", *(f"  {line}" for line in algo.safety.describe_lines())]
    lines += ["", "Logging:", *describe_trackers(run.settings.logging)]  # logging.trackers (rlpost/runs/trackers.py)
    warnings = run.config_warnings()  # degenerate settings: a method that cannot act (issue 48)
    if warnings:
        lines += ["", "Warnings (a method that cannot act in this run; its active/* figure would stay 0):"]
        lines += [f"  ! {line}" for line in warnings]
    return "\n".join(lines)
