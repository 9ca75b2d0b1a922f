"""One held-out evaluation of a training run: the run's own eval split, then every ``eval.sets`` set.

The run's split: greedy metrics (``eval/accuracy`` with a correctness criterion, ``eval/reward``,
``eval/mean_length``, per-term means) and, with ``eval.samples = n``, sampled ones under
``eval/sampled/`` (avg@n, pass@k, maj@k at ``train.temperature``). Each set of ``eval.sets``
(rlpost/evaluation/sets.py) the same under ``eval/<set>/`` with its own data, reward, size and sampling.
Scoring never moves a combine's training state (``RewardParts.held_out``), a failing reward never
kills the evaluation (rlpost/scoring/guard.py), and ZeRO-3 shards are gathered for ``generate``.

A ``data=mixture`` run (rlpost/data/mixture.py) scores each source's held-out prompts (its first ``eval.size``)
as the run's split would be scored in a run of that source alone: its own reward terms (combined by the run's
``reward.combine``), criterion, environment and sampling, under ``eval/<source>/`` (``accuracy``, ``reward``,
``mean_length``, the terms' means, ``env/...``, ``sampled/...``). The pooled ``eval/reward``, ``eval/accuracy``
(only when every source has a criterion), ``eval/mean_length`` and ``eval/num_prompts`` are over all sources'
prompts together, each prompt counting once, as in ``eval_items.json``, whose rows carry their ``source`` and
one index over all sources (what ``rlpost compare`` pairs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from rlpost.data.mixture import SOURCE_COLUMN
from rlpost.envs.base import held_out_episodes
from rlpost.evaluation.evaluate import evaluate, evaluate_sampled
from rlpost.launch.deepspeed import gathered_parameters
from rlpost.run import BuiltRun, RewardParts
from rlpost.runs.state import state_restored
from rlpost.scoring.correctness import Correctness
from rlpost.scoring.guard import guard_rewards


@dataclass(frozen=True)
class Split:
    """One held-out split to score: the run's own or an eval set's rows with its reward, criterion and sampling."""

    rows: Any
    reward: RewardParts
    correct: Correctness | None
    prefix: str  # eval (the run's split) or eval/<set>
    size: int
    max_new_tokens: int
    single: bool = True  # one completion per prompt (greedy, or sampled when greedy=false)
    greedy: bool = True
    samples: int = 0  # n sampled completions per prompt -> <prefix>/sampled/...
    pass_k: tuple[int, ...] = (1,)
    majority_answer: str | None = "last_number"
    group_by: str | None = None
    variants_of: str | None = None  # the column naming the question a row is a variant of (invariance.py)
    calibration: str | None = None  # the column of numeric targets of the sampled predictions (calibration.py)
    calibration_level: float = 0.8
    without_demos: str | None = None  # the column of each prompt's user turn without its demonstrations (few_shot.py)
    env: Any = None  # data/env: each held-out prompt is one episode (the run's split only)


def evaluate_run(
    run: BuiltRun, model, tokenizer, eval_set, set_rows: list[Any], items: list[dict] | None = None
) -> dict[str, float]:
    """Every held-out metric of ``model`` (``set_rows``: each eval set's held-out split, in ``run.eval_sets``
    order); ``items`` receives the run split's per-prompt rows (rlpost/evaluation/evaluate.py)."""
    ev, train = run.settings.eval, run.settings.train
    own = Split(
        eval_set, run.reward, run.correct, "eval", ev.size, train.max_completion_length, greedy=ev.greedy,
        samples=ev.samples, pass_k=tuple(ev.pass_k), majority_answer=ev.majority_answer, group_by=ev.group_by,
        variants_of=ev.variants_of, calibration=ev.calibration, calibration_level=ev.calibration_level, env=run.env,
        without_demos=ev.without_demos,
    )  # fmt: skip
    sets = [
        Split(
            rows,
            spec.reward,
            spec.correct,
            spec.prefix,
            spec.cfg.size,
            spec.cfg.max_new_tokens or train.max_completion_length,
            single=spec.cfg.greedy,
            samples=spec.cfg.samples,
            pass_k=tuple(spec.cfg.pass_k),
            majority_answer=spec.cfg.majority_answer,
            group_by=spec.cfg.group_by,
            variants_of=spec.cfg.variants_of,
            calibration=spec.cfg.calibration,
            calibration_level=spec.cfg.calibration_level,
            without_demos=spec.cfg.without_demos,
        )  # fmt: skip
        for spec, rows in zip(run.eval_sets, set_rows)
    ]
    result: dict[str, float] = {}
    with gathered_parameters(run.hardware, model):
        if run.mixture is not None:  # each source's split under eval/<source>/, then the pooled metrics
            own_splits = [
                replace(own, rows=[r for r in eval_set if r[SOURCE_COLUMN] == s.name], reward=s.reward,
                        correct=s.correct, prefix=f"eval/{s.name}", env=s.env)
                for s in run.mixture.sources
            ]  # fmt: skip
            result.update(_score_sources(own_splits, run, model, tokenizer, items))
        else:
            result.update(_score(own, run, model, tokenizer, items))
        for split in sets:
            result.update(_score(split, run, model, tokenizer))
    return result


def _score(split: Split, run: BuiltRun, model, tokenizer, items: list[dict] | None = None) -> dict[str, float]:
    """``split``'s single-completion and sampled metrics, its combine's training state left as it was."""
    ev, temperature, show = run.settings.eval, run.settings.train.temperature, run.settings.logging.progress
    reward = split.reward
    result: dict[str, float] = {}
    # nor a stateful environment (a factor database); episodes are played as held-out ones
    with reward.held_out(), state_restored(split.env), held_out_episodes(split.env):
        funcs = guard_rewards(reward.funcs, reward.failure)
        if split.single:
            result.update(
                evaluate(
                    model, tokenizer, split.rows, funcs, reward.names, reward.scored,
                    max_new_tokens=split.max_new_tokens, correct=split.correct, batch_size=ev.batch_size,
                    greedy=split.greedy, temperature=temperature, size=split.size, group_by=split.group_by,
                    variants_of=split.variants_of, show_progress=show, env=split.env, items=items, prefix=split.prefix,
                    without_demos=split.without_demos,
                )
            )  # fmt: skip
        if split.samples:
            result.update(
                evaluate_sampled(
                    model, tokenizer, split.rows, funcs, reward.scored, n=split.samples, ks=list(split.pass_k),
                    max_new_tokens=split.max_new_tokens, correct=split.correct, temperature=temperature,
                    batch_size=ev.batch_size, size=split.size, prefix=f"{split.prefix}/sampled",
                    show_progress=show, majority_answer=split.majority_answer, calibration=split.calibration,
                    calibration_level=split.calibration_level,
                )
            )  # fmt: skip
    return result


def _score_sources(splits: list[Split], run: BuiltRun, model, tokenizer, items: list[dict] | None) -> dict[str, float]:
    """A mixture's sources, each under its own prefix, and the pooled metrics over all their prompts (module
    docstring); ``items`` receives every source's per-prompt rows with their ``source``, indexed across sources."""
    result: dict[str, float] = {}
    pooled: list[dict] = []
    for split in splits:
        own: list[dict] = []
        result.update(_score(split, run, model, tokenizer, own))
        name = split.prefix.removeprefix("eval/")
        pooled += [{**item, "index": len(pooled) + k, "source": name} for k, item in enumerate(own)]
    rewards = [item["reward"] for item in pooled if item["reward"] is not None]
    result["eval/reward"] = sum(rewards) / len(rewards) if rewards else math.nan
    if all(split.correct is not None for split in splits):
        verdicts = [item["correct"] for item in pooled if item.get("correct") is not None]
        result["eval/accuracy"] = sum(verdicts) / len(verdicts) if verdicts else math.nan
    counts = [result[f"{split.prefix}/num_prompts"] for split in splits]
    lengths = [result[f"{split.prefix}/mean_length"] for split in splits]
    result["eval/mean_length"] = sum(n * m for n, m in zip(counts, lengths)) / max(sum(counts), 1)
    result["eval/num_prompts"] = sum(counts)
    if items is not None:
        items.extend(pooled)
    return result
