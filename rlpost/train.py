"""The training recipe, top to bottom: validate, load, evaluate, train, evaluate, summarize.

The summary (summary.json) lists the components whose activity figure stayed 0 for the whole run under
``inert`` (rlpost/analysis/inert.py), each with the reason where it is known; ``rlpost train`` prints them."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PrinterCallback
from trl import GRPOConfig

from rlpost.algorithms import trainer_class
from rlpost.analysis.inert import inert_figures
from rlpost.analysis.plots import plot_curves
from rlpost.build import build_run
from rlpost.core.config import check_columns
from rlpost.core.errors import ConfigError
from rlpost.core.secrets import install_log_redaction
from rlpost.data.sources import load_datasets
from rlpost.evaluation.best_checkpoint import BestCheckpoint
from rlpost.evaluation.callback import PeriodicEvalCallback
from rlpost.evaluation.held_out import evaluate_run
from rlpost.launch.deepspeed import write_deepspeed_config
from rlpost.models.loading import load_model, load_tokenizer, peft_config
from rlpost.run import BuiltRun
from rlpost.runs.callbacks import MetricsFileCallback, RichProgressCallback
from rlpost.runs.checkpoints import CheckpointWriteError, checkpoint_to_load, remove_stale_staging, skipped_checkpoints
from rlpost.runs.preemption import PreemptionCallback
from rlpost.runs.ranks import is_main, on_main, write_folder
from rlpost.runs.replay import ReplayWriter
from rlpost.runs.rundir import EVAL_ITEMS, EVAL_ITEMS_BEFORE, RunDirectory
from rlpost.runs.trackers import TrackerRuns
from rlpost.runs.trackers import configure as configure_trackers
from rlpost.scoring.breaker import RewardsBroken


def train(
    cfg: Any, run_dir: str | os.PathLike, overrides: list[str] | None = None, run: BuiltRun | None = None
) -> dict[str, Any]:
    """Run one training job described by the composed config ``cfg``; returns the summary.

    ``run`` is ``build_run(cfg)`` as the launch validated it (rlpost/app.py: ``rlpost train`` builds
    each job once and its Hydra job trains that run); without it (a direct call, or a job the launch
    did not build in this process) it is built here. Either way every config error is raised before
    any model loads."""
    if run is None:
        run = build_run(cfg)
    if run.mixture is not None:  # data=mixture: every source's rows, labelled by source (rlpost/data/mixture.py)
        train_set, eval_set = run.mixture.load(run.settings.eval.data_columns())
    else:
        train_set, eval_set = load_datasets(run.data, run.data_transform)  # data errors too, before anything is written
    _check_columns(run, train_set, eval_set)
    _check_samplers(run, train_set)
    held_out = HeldOut(eval_set, [_set_rows(s) for s in run.eval_sets])
    _check_resume(run.settings.resume)
    rundir = RunDirectory(run_dir)
    install_log_redaction()  # secrets never reach a log record (rlpost/core/secrets.py)
    if is_main():  # before the training arguments read it; the launching parent wrote the same file
        write_deepspeed_config(run.hardware, rundir.path)  # scale-out: <run>/deepspeed.json (rlpost/launch/)
    configure_trackers(run.settings.logging, rundir.path)  # logging.trackers, offline, in this run's directory

    tokenizer = load_tokenizer(run.model)
    model = load_model(run.model)
    args = GRPOConfig(**run.grpo_config_kwargs(str(rundir.checkpoints)))  # starts the process group
    resume_from = _start_attempt(run, rundir)  # from here on, one writer per path (rlpost/runs/ranks.py)
    rundir.write_config(cfg, overrides or [])
    for func in run.reward.funcs:  # one writer of a term's own run files (rlpost/rewards/base.py run_dir)
        func.run_dir = rundir.path if is_main() else None
    summary: dict[str, Any] = {"run_dir": str(rundir.path), "algorithm": run.algorithm.name}
    if run.settings.eval.at_start:
        summary["before"] = _evaluate_before(run, rundir, model, tokenizer, held_out, resumed=resume_from is not None)
        if resume_from is None:  # eval curves start at step 0 (a resumed run has that row already)
            rundir.append_metrics({"step": 0, **summary["before"]})

    preemption = PreemptionCallback()
    callbacks = [MetricsFileCallback(rundir), preemption]
    if run.settings.logging.progress:
        callbacks.append(RichProgressCallback())
    periodic = None
    best = BestCheckpoint(rundir.checkpoints, run.settings.eval.objective, run.settings.eval.objective_mode)

    def keep_if_best(step: int, metrics: dict) -> None:  # every rank: the save is collective
        best.consider(step, metrics, lambda staging: trainer.save_model(str(staging)))

    if run.settings.eval.every:  # held-out eval every N steps, logged at that step
        periodic = PeriodicEvalCallback(
            run.settings.eval.every,
            lambda m: _evaluate(run, m, tokenizer, held_out),
            run.settings.eval.at_end,
            on_result=keep_if_best,
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
    trackers = TrackerRuns(trainer)  # their runs stay open for the end-of-run evaluation (rlpost/runs/trackers.py)
    if run.settings.eval.at_start and resume_from is None:
        trackers.log(summary["before"])  # step 0, as in metrics.jsonl

    started = time.perf_counter()
    preemption.install()
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    except RewardsBroken as err:  # nothing left to learn from: save what can be saved, then stop (exit code 1)
        trackers.close()
        checkpoint = trainer.save_last_step()
        summary.update(stopped=str(err), steps=trainer.state.global_step, checkpoint=str(checkpoint or ""))
        rundir.write_summary(summary)
        where = f"; step {trainer.state.global_step} is saved in {checkpoint}" if checkpoint else ""
        raise RewardsBroken(f"{err}{where}") from None
    except BaseException:
        trackers.close()
        raise
    finally:
        preemption.uninstall()
    train_seconds = time.perf_counter() - started
    if preemption.received:  # a checkpoint was saved at the end of the step; exit code 75 (rlpost/tools/train.py)
        trackers.close()
        checkpoint = str(rundir.checkpoints / f"checkpoint-{trainer.state.global_step}")
        summary.update(preempted=preemption.received, checkpoint=checkpoint, steps=trainer.state.global_step)
        rundir.write_summary(summary)
        return summary
    _save_final(trainer, rundir.checkpoints)

    summary.update(
        steps=trainer.state.global_step,
        train_seconds=round(train_seconds, 2),
        seconds_per_step=round(train_seconds / max(trainer.state.global_step, 1), 3),
        final_checkpoint=str(rundir.checkpoints / "final"),
        last_log=trainer.state.log_history[-1] if trainer.state.log_history else {},
        inert=inert_components(run, rundir.read_metrics()),  # activity figures that stayed 0 (issue 48)
    )
    if run.settings.eval.at_end:
        items: list[dict] = []
        summary["after"] = _evaluate(run, trainer.model, tokenizer, held_out, items)
        rundir.write_json(EVAL_ITEMS, items)  # per held-out prompt, for paired tests (rlpost compare)
        rundir.append_metrics({"step": trainer.state.global_step, **summary["after"]})
        trackers.log(summary["after"])
        keep_if_best(trainer.state.global_step, summary["after"])
    trackers.close()
    summary["best"] = best.summary()  # None: no held-out evaluation of the trained policy logged the objective
    if run.settings.logging.plots:
        plot = plot_curves({rundir.path.name: rundir.read_metrics()}, rundir.plots / "training.png")
        summary["plot"] = str(plot) if plot else None
    rundir.write_summary(summary)
    return summary


def inert_components(run: BuiltRun, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The components whose activity figure stayed 0 in the logged training ``rows`` (every step of the run,
    resumed attempts included: metrics.jsonl), each with its own reason (``Component.inert_reason``) or a generic
    one (rlpost/analysis/inert.py)."""
    inert = {entry["figure"] for entry in inert_figures(rows)}
    reasons = {}
    for name, component in run.figure_components():
        reason = component.inert_reason(rows, run) if name in inert else None
        if reason:
            reasons[name] = reason
    return inert_figures(rows, reasons)


@dataclass(frozen=True)
class HeldOut:
    """The held-out rows a run evaluates on: its own eval split and each eval set's (run.eval_sets order)."""

    rows: Any
    set_rows: list[Any]


def _set_rows(spec) -> Any:
    """An eval set's held-out split (rlpost/evaluation/sets.py), loaded before any model, with the columns its
    readouts name (group_by, variants_of, calibration) checked."""
    rows = load_datasets(spec.data, spec.transform)[1]
    named = {f"{spec.prefix}: {key}": column for key, column in spec.cfg.data_columns().items()}
    check_columns(named, rows.column_names, f"data={spec.cfg.data}'s eval split")
    return rows


def _check_columns(run: BuiltRun, train_set, eval_set) -> None:
    """Every dataset column a reward term, ``eval.*`` (group_by, variants_of, calibration) or a component
    (``Component.training_columns``) names exists, before any model loads."""
    for name, func in zip(run.reward.names, run.reward.funcs):
        for param, col in func.data_columns():
            missing = [
                split
                for split, data in (("training", train_set), ("held-out", eval_set))
                if col not in data.column_names
            ]
            if missing:
                raise ConfigError(
                    f"reward term {name}: params.{param}={col!r} names no column of the {' and '.join(missing)} data; "
                    f"its columns are: {', '.join(train_set.column_names)}"
                )
    check_columns(run.settings.eval.data_columns(), eval_set.column_names, "the eval split")
    for component in run.components():  # e.g. pmi_tokens' answer_column, hindsight_critique's gold_column
        check_columns(component.training_columns(), train_set.column_names, "the training data")


def _check_samplers(run: BuiltRun, train_set) -> None:
    """Each component's sampler built once on the training rows, with the batch the trainer will give it (TRL's
    generation batch: completions_per_step x minibatches), before any model loads: AIR's whole-intent batches
    refuse an intent with more variants than a generation batch holds prompts."""
    prompts = run.plan.prompts_per_step * run.settings.train.minibatches
    for name, component in run.named_components():  # the first sampler wins, as in RLPostTrainer._get_train_sampler
        try:
            sampler = component.sampler(
                train_set, generation_batch_prompts=prompts, num_generations=run.plan.num_generations,
                seed=run.settings.seed,
            )  # fmt: skip
        except ValueError as err:
            raise ConfigError(f"{name}: {err}") from None
        if sampler is not None:
            return


def _evaluate(run: BuiltRun, model, tokenizer, held_out: HeldOut, items: list[dict] | None = None) -> dict[str, float]:
    return evaluate_run(run, model, tokenizer, held_out.rows, held_out.set_rows, items)


def _check_resume(resume: str | None) -> None:
    if resume not in (None, "auto") and not Path(resume).is_dir():
        raise ConfigError(f"resume={resume!r} is neither a run directory nor a checkpoint folder (or use resume=auto).")


def _start_attempt(run: BuiltRun, rundir: RunDirectory) -> str | None:
    """The complete checkpoint to continue from (rlpost/runs/checkpoints.py), or None for a fresh start.

    Resuming drops what a killed launch logged after that checkpoint from metrics.jsonl and
    samples.jsonl; a fresh start clears everything an earlier attempt in this run directory logged
    (a launch killed before its first checkpoint), so no row, plot or tracker event shows twice.
    """
    resume = run.settings.resume
    on_main(lambda: remove_stale_staging(rundir.checkpoints))  # a save killed half-way
    checkpoint = checkpoint_to_load(resume, rundir.checkpoints)
    if is_main():
        for line in skipped_checkpoints(rundir.checkpoints) if resume is not None else []:
            print(f"rlpost: resume={resume}: {line}", file=sys.stderr)
    if checkpoint is None:
        on_main(lambda: _report_cleared(rundir.clear_attempt(), rundir))
        return None
    step = json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"]
    on_main(lambda: rundir.truncate_after(step))
    return checkpoint


def _report_cleared(cleared: list[str], rundir: RunDirectory) -> None:
    if cleared:
        print(
            f"rlpost: starting fresh in {rundir.path}: removed {', '.join(cleared)} of an earlier attempt",
            file=sys.stderr,
        )


def _evaluate_before(run: BuiltRun, rundir: RunDirectory, model, tokenizer, held_out: HeldOut, resumed: bool) -> dict:
    """The start-of-run evaluation, stored in eval_before.json and reused when the run resumes."""
    stored = rundir.path / "eval_before.json"
    if resumed and stored.is_file():
        return json.loads(stored.read_text())
    items: list[dict] = []
    result = _evaluate(run, model, tokenizer, held_out, items)
    rundir.write_json(EVAL_ITEMS_BEFORE, items)
    rundir.write_json(stored.name, result)
    return result


def _save_final(trainer, checkpoints: Path) -> None:
    """``checkpoints/final``, written by every rank into a staging folder and renamed into place by the
    main process (rlpost/runs/ranks.py): a kill or a full disk never leaves half of it, nor removes the last
    complete checkpoint."""
    try:
        write_folder(checkpoints / "final", lambda staging: trainer.save_model(str(staging)))
    except OSError as err:
        raise CheckpointWriteError("final", checkpoints, err) from err
