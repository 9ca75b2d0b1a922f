"""The training recipe, top to bottom: validate, load, evaluate, train, evaluate, summarize."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from transformers import PrinterCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig

from rlpost.algorithms import trainer_class
from rlpost.build import BuiltRun, build_run
from rlpost.callbacks import MetricsFileCallback, RichProgressCallback
from rlpost.data import load_datasets
from rlpost.errors import ConfigError
from rlpost.eval_callback import PeriodicEvalCallback
from rlpost.evaluate import evaluate
from rlpost.models import load_model, load_tokenizer, peft_config
from rlpost.plots import plot_curves
from rlpost.replay import ReplayWriter
from rlpost.rundir import RunDirectory


def train(cfg: Any, run_dir: str | os.PathLike, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run one training job described by the composed config ``cfg``; returns the summary."""
    run = build_run(cfg)  # every config error is raised here, before any model loads
    train_set, eval_set = load_datasets(run.data)  # data errors too, before anything is written
    _check_eval_columns(run, eval_set)
    rundir = RunDirectory(run_dir)
    rundir.write_config(cfg, overrides or [])
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(rundir.path / "tensorboard")  # per job, also in sweeps
    _configure_wandb(run, rundir)

    tokenizer = load_tokenizer(run.model)
    model = load_model(run.model)
    summary: dict[str, Any] = {"run_dir": str(rundir.path), "algorithm": run.algorithm.name}
    if run.settings.eval.at_start:
        summary["before"] = _evaluate(run, model, tokenizer, eval_set)
        rundir.append_metrics({"step": 0, **summary["before"]})  # eval curves start at step 0

    args = GRPOConfig(**run.grpo_config_kwargs(str(rundir.checkpoints)))
    callbacks = [MetricsFileCallback(rundir)]
    if run.settings.logging.progress:
        callbacks.append(RichProgressCallback())
    periodic = None
    if run.settings.eval.every:  # held-out eval every N steps, logged at that step
        periodic = PeriodicEvalCallback(
            run.settings.eval.every, lambda m: _evaluate(run, m, tokenizer, eval_set), run.settings.eval.at_end
        )
        callbacks.append(periodic)
    trainer = trainer_class(run)(  # RLPostTrainer, PPOTrainer (a critic) or RegenTrainer (replays)
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=train_set,
        peft_config=peft_config(run.model),
        callbacks=callbacks,
        run=run,
        sample_sink=rundir.append_samples,
        replay=ReplayWriter(rundir.path / "rollouts") if run.settings.logging.replay else None,
        event_sink=rundir.append_event,
    )
    trainer.remove_callback(PrinterCallback)
    if periodic is not None:
        periodic.attach(trainer)

    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=_resume_checkpoint(run, rundir))
    train_seconds = time.perf_counter() - started
    trainer.save_model(str(rundir.checkpoints / "final"))

    summary.update(
        steps=trainer.state.global_step,
        train_seconds=round(train_seconds, 2),
        seconds_per_step=round(train_seconds / max(trainer.state.global_step, 1), 3),
        final_checkpoint=str(rundir.checkpoints / "final"),
        last_log=trainer.state.log_history[-1] if trainer.state.log_history else {},
    )
    if run.settings.eval.at_end:
        summary["after"] = _evaluate(run, trainer.model, tokenizer, eval_set)
        rundir.append_metrics({"step": trainer.state.global_step, **summary["after"]})
    if run.settings.logging.plots:
        plot = plot_curves({rundir.path.name: rundir.read_metrics()}, rundir.plots / "training.png")
        summary["plot"] = str(plot) if plot else None
    rundir.write_summary(summary)
    return summary


def _check_eval_columns(run: BuiltRun, eval_set) -> None:
    group_by = run.settings.eval.group_by
    if group_by is not None and group_by not in eval_set.column_names:
        raise ConfigError(
            f"eval.group_by={group_by!r} is not a column of the eval split; "
            f"its columns are: {', '.join(eval_set.column_names)}"
        )


def _evaluate(run: BuiltRun, model, tokenizer, eval_set) -> dict[str, float]:
    settings = run.settings
    return evaluate(
        model,
        tokenizer,
        eval_set,
        run.reward.funcs,
        run.reward.names,
        run.reward.weights,
        max_new_tokens=settings.train.max_completion_length,
        batch_size=settings.eval.batch_size,
        greedy=settings.eval.greedy,
        temperature=settings.train.temperature,
        size=settings.eval.size,
        group_by=settings.eval.group_by,
        show_progress=settings.logging.progress,
    )


def _resume_checkpoint(run: BuiltRun, rundir: RunDirectory) -> str | None:
    resume = run.settings.resume
    if resume is None:
        return None
    if resume == "auto":
        return get_last_checkpoint(str(rundir.checkpoints)) if rundir.checkpoints.is_dir() else None
    if not Path(resume).is_dir():
        raise ConfigError(f"resume={resume!r} is not a checkpoint folder (or use resume=auto).")
    return resume


def _configure_wandb(run: BuiltRun, rundir: RunDirectory) -> None:
    mode = run.settings.logging.wandb
    os.environ["WANDB_MODE"] = mode
    os.environ["WANDB_DIR"] = str(rundir.path)  # offline runs sync later from <run>/wandb/
    os.environ.setdefault("WANDB_PROJECT", run.settings.logging.wandb_project)
