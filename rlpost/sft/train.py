"""The SFT recipe, top to bottom: load, evaluate, train, evaluate, summarize (rlpost/train.py's shape).

    rlpost sft [model=... data=... reward=...] ['target="{expression} = {answer}"'] [train.steps=...] [-m]
    rlpost sft recipe=sft_demo_bound seed=0      # the default demo's supervised bound (bench/METHODS.md)

Each optimizer step takes ``train.prompts_per_step`` training rows (in ``train.micro_batch_size`` micro batches)
and minimizes TRL's negative log-likelihood of their completions (the target and its EOS; rlpost/sft/targets.py),
averaged over all completion tokens of the step (TRL's ``completion_only_loss``; the prompt is masked out).
Held-out evaluation is ``rlpost train``'s (rlpost/evaluation/held_out.py ``evaluate_run``: ``eval/accuracy`` from
the reward's correctness term, ``eval/reward``, ``eval/mean_length``, the eval sets) before training, every
``eval.every`` steps and at the end, logged to ``metrics.jsonl`` at its step.

The run directory is ``rlpost train``'s: ``config.yaml``, ``overrides.yaml``, ``metrics.jsonl`` (step 0: the
evaluation before training; then one row per step: ``loss``, ``grad_norm``, ``learning_rate``, TRL's ``entropy``,
``mean_token_accuracy`` and ``num_tokens``, and the ``eval/*`` rows), ``checkpoints/checkpoint-N`` (atomic,
``train.save_steps``), ``checkpoints/final`` (a plain model folder with its tokenizer, or the LoRA adapter with
``model.lora.enabled``), ``checkpoints/best`` (with ``eval.every``), ``eval_before.json``,
``eval_items_before.json``, ``eval_items.json``, ``plots/training.png`` and ``summary.json``. So
``rlpost train model=hf model.path=<run>/checkpoints/final``, ``rlpost eval run=<run>``, ``rlpost merge
models=[<run>]``, ``rlpost compare`` and ``rlpost report`` read it as they read a training run. ``resume=auto`` and
SIGTERM/SIGINT (a checkpoint after the step in progress, exit code 75) work as in ``rlpost train``
(rlpost/runs/checkpoints.py, rlpost/runs/preemption.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rlpost.analysis.plots import plot_curves
from rlpost.core.config import checkpointing_arg
from rlpost.core.errors import ConfigError
from rlpost.core.secrets import install_log_redaction
from rlpost.evaluation.best_checkpoint import BestCheckpoint
from rlpost.evaluation.callback import PeriodicEvalCallback
from rlpost.evaluation.held_out import evaluate_run
from rlpost.models.loading import load_model, load_tokenizer, peft_config
from rlpost.runs.callbacks import MetricsFileCallback, RichProgressCallback
from rlpost.runs.checkpoints import CheckpointWriteError, checkpoint_to_load, remove_stale_staging, skipped_checkpoints
from rlpost.runs.preemption import PreemptionCallback
from rlpost.runs.ranks import write_folder
from rlpost.runs.rundir import EVAL_ITEMS, EVAL_ITEMS_BEFORE, RunDirectory
from rlpost.runs.trackers import configure as configure_trackers
from rlpost.sft.config import SFTJob, SFTSettings
from rlpost.sft.targets import sft_dataset
from rlpost.sft.trainer import RunSFTTrainer

PLOT_KEYS = ("loss", "mean_token_accuracy", "entropy", "eval/accuracy", "eval/reward")


def train_sft(job: SFTJob, cfg: Any, run_dir: str | os.PathLike, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run one SFT job (``job``: ``build_job(cfg)``, everything checked before this loads a model); returns the
    summary."""
    s, run = job.settings, job.run
    rundir = RunDirectory(run_dir)
    install_log_redaction()  # secrets never reach a log record (rlpost/core/secrets.py)
    configure_trackers(s.logging, rundir.path)  # logging.trackers, offline, in this run's directory (as rlpost train)

    tokenizer = load_tokenizer(s.model)
    model = load_model(s.model).to(s.hardware.device)
    train_set = sft_dataset(tokenizer, job.prompts, job.targets)
    _check_lengths(train_set, s.train.max_length)
    resume_from = _start_attempt(s.resume, rundir)
    rundir.write_config(cfg, overrides or [])
    summary: dict[str, Any] = {"run_dir": str(rundir.path), "algorithm": "sft", "model": s.model.display_name}

    def evaluate(policy, items: list[dict] | None = None) -> dict[str, float]:
        return evaluate_run(run, policy, tokenizer, job.eval_rows, job.set_rows, items)

    if s.eval.at_start:
        summary["before"] = _evaluate_before(evaluate, model, rundir, resumed=resume_from is not None)
        if resume_from is None:  # eval curves start at step 0 (a resumed run has that row already)
            rundir.append_metrics({"step": 0, **summary["before"]})

    preemption = PreemptionCallback()
    callbacks: list[Any] = [MetricsFileCallback(rundir), preemption]
    if s.logging.progress:
        callbacks.append(RichProgressCallback())
    best = BestCheckpoint(rundir.checkpoints, run.settings.eval.objective, s.eval.objective_mode)

    def keep_if_best(step: int, metrics: dict) -> None:
        best.consider(step, metrics, lambda staging: trainer.save_model(str(staging)))

    periodic = None
    if s.eval.every:
        periodic = PeriodicEvalCallback(s.eval.every, evaluate, s.eval.at_end, on_result=keep_if_best)
        callbacks.append(periodic)
    trainer = make_trainer(s, model, tokenizer, train_set, rundir.checkpoints, callbacks)
    if periodic is not None:
        periodic.attach(trainer)

    started = time.perf_counter()
    preemption.install()
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    finally:
        preemption.uninstall()
    train_seconds = time.perf_counter() - started
    step = trainer.state.global_step
    if preemption.received:  # a checkpoint was saved at the end of the step; exit code 75 (rlpost/tools/sft.py)
        summary.update(preempted=preemption.received, checkpoint=str(rundir.checkpoints / f"checkpoint-{step}"))
        summary["steps"] = step
        rundir.write_summary(summary)
        return summary
    try:
        write_folder(rundir.checkpoints / "final", lambda staging: trainer.save_model(str(staging)))
    except OSError as err:
        raise CheckpointWriteError("final", rundir.checkpoints, err) from err

    summary.update(
        steps=step,
        train_seconds=round(train_seconds, 2),
        seconds_per_step=round(train_seconds / max(step, 1), 3),
        final_checkpoint=str(rundir.checkpoints / "final"),
        last_log=trainer.state.log_history[-1] if trainer.state.log_history else {},
    )
    if s.eval.at_end:
        items: list[dict] = []
        summary["after"] = evaluate(trainer.model, items)
        rundir.write_json(EVAL_ITEMS, items)  # per held-out prompt, for paired tests (rlpost compare)
        rundir.append_metrics({"step": step, **summary["after"]})
        keep_if_best(step, summary["after"])
    summary["best"] = best.summary()
    if s.logging.plots:
        plot = plot_curves({rundir.path.name: rundir.read_metrics()}, rundir.plots / "training.png", PLOT_KEYS)
        summary["plot"] = str(plot) if plot else None
    rundir.write_summary(summary)
    return summary


def sft_config_kwargs(s: SFTSettings, output_dir: str | os.PathLike) -> dict[str, Any]:
    """Keyword arguments for ``trl.SFTConfig`` of this job (the one place ``rlpost sft`` maps onto TRL)."""
    t, hw, lg = s.train, s.hardware, s.logging
    report_to = lg.active_trackers()
    return dict(
        output_dir=str(output_dir),
        seed=s.seed,
        data_seed=s.seed,
        max_steps=t.steps,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup_ratio,  # a float < 1 is a ratio of max_steps
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        per_device_train_batch_size=s.micro_batch_size,
        gradient_accumulation_steps=t.prompts_per_step // s.micro_batch_size,
        train_sampling_strategy="random" if t.shuffle else "sequential",
        **{checkpointing_arg(): t.gradient_checkpointing},  # TRL's SFTConfig would turn it on
        bf16=hw.precision == "bf16",  # TRL's SFTConfig would default to bf16
        fp16=hw.precision == "fp16",
        use_cpu=hw.device == "cpu",
        max_length=t.max_length,
        completion_only_loss=True,  # the loss on the target and its EOS only (the rows carry completion_mask)
        packing=False,
        logging_steps=1,
        save_strategy="steps" if t.save_steps else "no",
        save_steps=t.save_steps or 500,
        save_total_limit=t.save_total_limit,
        report_to=report_to or "none",
        disable_tqdm=True,  # rlpost draws its own progress bar
        run_name=s.run_name,
    )


def make_trainer(s: SFTSettings, model, tokenizer, train_set, output_dir: str | os.PathLike, callbacks: list[Any]):
    """The SFT trainer of this job over the tokenized rows (``targets.sft_dataset``)."""
    from transformers import PrinterCallback
    from trl import SFTConfig

    trainer = RunSFTTrainer(
        model=model,
        args=SFTConfig(**sft_config_kwargs(s, output_dir)),
        train_dataset=train_set,
        processing_class=tokenizer,
        peft_config=peft_config(s.model),
        callbacks=callbacks,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def _check_lengths(train_set, max_length: int) -> None:
    """Rows whose prompt alone fills ``train.max_length`` keep no target token (TRL drops them): a warning for
    some, a ConfigError when none would be left."""
    cut = sum(1 for mask in train_set["completion_mask"] if 1 not in mask[:max_length])
    if cut == len(train_set):
        raise ConfigError(
            f"train.max_length={max_length}: every training prompt fills it, so no target token is left to train; "
            "raise train.max_length."
        )
    if cut:
        print(f"rlpost: train.max_length={max_length} leaves no target token in {cut} of {len(train_set)} rows; "
              "they are skipped", file=sys.stderr)  # fmt: skip


def _start_attempt(resume: str | None, rundir: RunDirectory) -> str | None:
    """The complete checkpoint to continue from, or None for a fresh start (rlpost/train.py ``_start_attempt``):
    resuming drops what a killed launch logged after that checkpoint; a fresh start clears an earlier attempt."""
    remove_stale_staging(rundir.checkpoints)  # a save killed half-way
    checkpoint = checkpoint_to_load(resume, rundir.checkpoints)
    for line in skipped_checkpoints(rundir.checkpoints) if resume is not None else []:
        print(f"rlpost: resume={resume}: {line}", file=sys.stderr)
    if checkpoint is None:
        cleared = rundir.clear_attempt()
        if cleared:
            print(f"rlpost: starting fresh in {rundir.path}: removed {', '.join(cleared)} of an earlier attempt",
                  file=sys.stderr)  # fmt: skip
        return None
    rundir.truncate_after(json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"])
    return checkpoint


def _evaluate_before(evaluate, model, rundir: RunDirectory, resumed: bool) -> dict[str, float]:
    """The start-of-run evaluation, stored in eval_before.json and reused when the run resumes."""
    stored = rundir.path / "eval_before.json"
    if resumed and stored.is_file():
        return json.loads(stored.read_text())
    items: list[dict] = []
    result = evaluate(model, items)
    rundir.write_json(EVAL_ITEMS_BEFORE, items)
    rundir.write_json(stored.name, result)
    return result
