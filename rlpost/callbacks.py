"""Trainer callbacks: metrics.jsonl, a rich progress bar."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import TrainerCallback

from rlpost.rundir import RunDirectory

PROGRESS_KEYS = ("reward", "loss", "entropy", "kl")


class MetricsFileCallback(TrainerCallback):
    """Appends every training log (one row per optimizer step) to the run's metrics.jsonl."""

    def __init__(self, rundir: RunDirectory):
        self.rundir = rundir

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            self.rundir.append_metrics({"step": state.global_step, **logs})


class RichProgressCallback(TrainerCallback):
    """One progress bar over optimizer steps, showing the latest reward and loss."""

    def __init__(self):
        self.progress: Progress | None = None
        self.task = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
        )
        self.progress.start()
        self.task = self.progress.add_task("", total=state.max_steps, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is None or not logs:
            return
        shown = [f"{k}={logs[k]:.3g}" for k in PROGRESS_KEYS if isinstance(logs.get(k), (int, float))]
        self.progress.update(self.task, completed=state.global_step, description=" ".join(shown))

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
            self.progress.stop()
            self.progress = None
