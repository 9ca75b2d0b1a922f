"""Trainer callbacks: metrics.jsonl, a rich progress bar."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import TrainerCallback

from rlpost.runs.rundir import RunDirectory

PROGRESS_KEYS = ("reward", "loss", "entropy", "kl")


def held_out_summary(logs: dict) -> list[str]:
    """The bar's words for one held-out evaluation: per split (the run's, each eval set's), its accuracy
    when it has one, else its reward; e.g. ``eval/accuracy=0.41 eval/gsm/accuracy=0.12``."""
    shown = []
    for prefix in sorted({k.rpartition("/")[0] for k in logs if k.endswith(("/accuracy", "/reward"))}):
        key = f"{prefix}/accuracy" if f"{prefix}/accuracy" in logs else f"{prefix}/reward"
        if prefix.startswith("eval") and "sampled" not in prefix and isinstance(logs.get(key), (int, float)):
            shown.append(f"{key}={logs[key]:.3g}")
    return shown


class MetricsFileCallback(TrainerCallback):
    """Appends every training log (one row per optimizer step) to the run's metrics.jsonl."""

    def __init__(self, rundir: RunDirectory):
        self.rundir = rundir

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            self.rundir.append_metrics({"step": state.global_step, **logs})


class RichProgressCallback(TrainerCallback):
    """One progress bar over optimizer steps, showing the latest reward and loss and the latest held-out evaluation."""

    def __init__(self):
        self.progress: Progress | None = None
        self.task = None
        self.last_train: list[str] = []  # the latest training row's PROGRESS_KEYS
        self.last_eval: list[str] = []  # the latest held-out evaluation (held_out_summary)

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
        if any(k.startswith("eval/") for k in logs):  # a held-out evaluation: kept on the bar until the next
            self.last_eval = held_out_summary(logs)
            shown = [*self.last_train, *self.last_eval]
        else:
            self.last_train = [f"{k}={logs[k]:.3g}" for k in PROGRESS_KEYS if isinstance(logs.get(k), (int, float))]
            shown = [*self.last_train, *self.last_eval]
        self.progress.update(self.task, completed=state.global_step, description=" ".join(shown))

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
            self.progress.stop()
            self.progress = None
