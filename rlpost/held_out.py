"""One held-out evaluation of a training run: the run's own eval split, then every ``eval.sets`` set.

The run's split: greedy metrics (``eval/accuracy`` with a correctness criterion, ``eval/reward``,
``eval/mean_length``, per-term means) and, with ``eval.samples = n``, sampled ones under
``eval/sampled/`` (avg@n, pass@k, maj@k at ``train.temperature``). Each set of ``eval.sets``
(rlpost/eval_sets.py) the same under ``eval/<set>/`` with its own data, reward, size and sampling.
Scoring never moves a combine's training state (``RewardParts.held_out``), a failing reward never
kills the evaluation (rlpost/reward_guard.py), and ZeRO-3 shards are gathered for ``generate``.
"""

from __future__ import annotations

from typing import Any

from rlpost.evaluate import evaluate, evaluate_sampled
from rlpost.launch.deepspeed import gathered_parameters
from rlpost.reward_guard import guard_rewards
from rlpost.run import BuiltRun


def evaluate_run(
    run: BuiltRun, model, tokenizer, eval_set, set_rows: list[Any], items: list[dict] | None = None
) -> dict[str, float]:
    """Every held-out metric of ``model`` (``set_rows``: each eval set's held-out split, in ``run.eval_sets``
    order); ``items`` receives the run split's per-prompt rows (rlpost/evaluate.py)."""
    settings, ev = run.settings, run.settings.eval
    show = settings.logging.progress
    with gathered_parameters(run.hardware, model):
        with run.reward.held_out():
            funcs = guard_rewards(run.reward.funcs, run.reward.failure)
            result = evaluate(
                model, tokenizer, eval_set, funcs, run.reward.names, run.reward.scored,
                max_new_tokens=settings.train.max_completion_length, correct=run.correct,
                batch_size=ev.batch_size, greedy=ev.greedy, temperature=settings.train.temperature,
                size=ev.size, group_by=ev.group_by, show_progress=show,
                env=run.env,  # data/env: each held-out prompt is one episode
                items=items,
            )  # fmt: skip
            if ev.samples:
                result.update(
                    evaluate_sampled(
                        model, tokenizer, eval_set, funcs, run.reward.scored, n=ev.samples, ks=list(ev.pass_k),
                        max_new_tokens=settings.train.max_completion_length, correct=run.correct,
                        temperature=settings.train.temperature, batch_size=ev.batch_size, size=ev.size,
                        prefix="eval/sampled", show_progress=show, majority_answer=ev.majority_answer,
                    )
                )  # fmt: skip
        for eval_set_spec, rows in zip(run.eval_sets, set_rows):
            result.update(_evaluate_set(run, eval_set_spec, rows, model, tokenizer))
    return result


def _evaluate_set(run: BuiltRun, spec, rows, model, tokenizer) -> dict[str, float]:
    """One ``eval.sets`` set (rlpost/eval_sets.py ``EvalSet``) -> ``eval/<name>/...``."""
    cfg, reward = spec.cfg, spec.reward
    settings = run.settings
    max_new_tokens = cfg.max_new_tokens or settings.train.max_completion_length
    result: dict[str, float] = {}
    with reward.held_out():
        funcs = guard_rewards(reward.funcs, reward.failure)
        if cfg.greedy:
            result.update(
                evaluate(
                    model, tokenizer, rows, funcs, reward.names, reward.scored, max_new_tokens=max_new_tokens,
                    correct=spec.correct, batch_size=settings.eval.batch_size, size=cfg.size,
                    show_progress=settings.logging.progress, prefix=spec.prefix,
                )
            )  # fmt: skip
        if cfg.samples:
            result.update(
                evaluate_sampled(
                    model, tokenizer, rows, funcs, reward.scored, n=cfg.samples, ks=list(cfg.pass_k),
                    max_new_tokens=max_new_tokens, correct=spec.correct, temperature=settings.train.temperature,
                    batch_size=settings.eval.batch_size, size=cfg.size, prefix=f"{spec.prefix}/sampled",
                    show_progress=settings.logging.progress, majority_answer=cfg.majority_answer,
                )
            )  # fmt: skip
    return result
