"""``logging.trackers``: where every logged metric goes besides metrics.jsonl, each offline, its files in the run.

    rlpost train 'logging.trackers=[tensorboard,mlflow,trackio]'

Each tracker is transformers' own ``report_to`` integration (``TensorBoardCallback``, ``WandbCallback``,
``MLflowCallback``, ``TrackioCallback``), set up for each run through what it reads (``configure``):

    tensorboard  <run>/tensorboard/       event files (TENSORBOARD_LOGGING_DIR)
    wandb        <run>/wandb/             WANDB_MODE = logging.wandb_mode (offline: ``wandb sync`` later), WANDB_DIR
    mlflow       <run>/mlruns/            MLFLOW_TRACKING_URI = file:<run>/mlruns (or logging.mlflow_uri): MLflow's
                                          local file store, experiment logging.project, run name run_name
    trackio      <run>/trackio/<project>.db   trackio's local SQLite store; never a Space

Choices where the integrations leave room:
- **Offline.** MLflow's telemetry is off (MLFLOW_DISABLE_TELEMETRY); MLflow 3 keeps its file store in
  "maintenance mode" and refuses it unless MLFLOW_ALLOW_FILE_STORE=true, which rlpost sets for a ``file:`` URI
  (a ``sqlite:`` URI in logging.mlflow_uri needs the full ``mlflow`` package). trackio's ``trackio_space_id``
  stays None and ``trackio_static_space_id`` False (rlpost/core/config.py), so nothing is synced or frozen,
  and its ``init`` runs with the Hub in offline mode: it would otherwise ask the Hub for the logged-in
  user's name.
- **trackio's folder.** trackio reads TRACKIO_DIR once, when it is first imported (TRL imports it with its
  trainer), and its modules keep that path: ``_point_trackio_at`` repoints them for each run, so every job
  of a sweep writes into its own run directory (tests/trainer/test_trackers_trainer.py reads the database there).
- **Keys.** MLflow gets metrics.jsonl's keys at the optimizer step (its callback already logs them so; MLflow
  replaces characters it does not accept, e.g. ``@``, with ``_``). trackio gets them the same way
  (``TrackioMetrics``): transformers' own callback would prefix ``train/`` and let trackio count its own
  steps, which drift from the optimizer step once TRL's profiling logs at explicit steps. wandb and
  tensorboard keep transformers' ``train/`` prefix, as before. MLflow's file store keeps each metric in a
  file named by its key, so no key may be a folder of another (``a/b`` beside ``a/b/c``): the store refuses
  the whole step's batch from that key on. rlpost's own names keep to that (the group-varied column count is
  ``rlpost/varied_reward_columns``, not under ``rlpost/reward``; tests/trainer/test_trackers_trainer.py reads every
  key back).
- **Every row of metrics.jsonl.** The held-out evaluations before training (step 0) and at its end are
  written outside the trainer's log; ``TrackerRuns`` hands those rows to each tracker at their step, and
  holds the trackers' ``on_train_end`` (which closes their runs) until ``close``, after the last one.
  Only rank 0 logs (each integration checks ``state.is_world_process_zero``; rlpost/runs/ranks.py rule 1).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlpost.core.config import LoggingSettings
from rlpost.core.errors import ConfigError

# tracker -> (the module it imports, the pip extra that installs it, its package)
PACKAGES: dict[str, tuple[str, str, str]] = {
    "tensorboard": ("tensorboard", "", "tensorboard"),  # a dependency of rlpost
    "wandb": ("wandb", "wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow", "mlflow-skinny"),
    "trackio": ("trackio", "trackio", "trackio"),
}
_told: set[str] = set()  # deprecation lines already printed by this process


def check_trackers(logging: LoggingSettings) -> None:
    """Before any model loads: each tracker installed, online wandb with its key, no setting without its tracker;
    deprecated keys printed once with what to write instead."""
    active = logging.active_trackers()
    for name in active:
        module, extra, package = PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"logging.trackers has {name}, which needs the {package} package: pip install 'rlpost[{extra}]' "
                f"(or pip install {package}), or drop it from logging.trackers={active}."
            )
    if "wandb" in active and logging.wandb_run_mode == "online" and not os.environ.get("WANDB_API_KEY"):
        key = "logging.wandb=online" if logging.wandb == "online" else "logging.wandb_mode=online"
        raise ConfigError(f"{key} needs WANDB_API_KEY in the environment (or use logging.wandb_mode=offline).")
    if logging.mlflow_uri is not None and "mlflow" not in active:
        raise ConfigError(
            f"logging.mlflow_uri={logging.mlflow_uri!r} is set but mlflow is not in logging.trackers={active}: "
            f"add it (logging.trackers=[{','.join([*active, 'mlflow'])}]) or drop logging.mlflow_uri."
        )
    for line in logging.deprecations():
        if line not in _told:
            _told.add(line)
            print(f"rlpost: {line}", file=sys.stderr)


def mlflow_uri(logging: LoggingSettings, run_dir: Path) -> str:
    """The run's MLflow tracking URI: ``logging.mlflow_uri`` (a folder without a scheme becomes a ``file:`` URI),
    else ``file:<run>/mlruns``."""
    uri = logging.mlflow_uri
    if uri is None:
        return (Path(run_dir).resolve() / "mlruns").as_uri()
    if "://" not in uri and not uri.startswith(("file:", "sqlite:", "databricks")):
        return Path(uri).resolve().as_uri()
    return uri


def configure(logging: LoggingSettings, run_dir: Path) -> None:
    """Point each tracker at this run (every process; only rank 0 logs). Called once per job, before the trainer."""
    run_dir = Path(run_dir)
    active = logging.active_trackers()
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(run_dir / "tensorboard")  # per job, also in sweeps
    os.environ["WANDB_MODE"] = logging.wandb_run_mode if "wandb" in active else "disabled"
    os.environ["WANDB_DIR"] = str(run_dir)  # offline runs sync later from <run>/wandb/
    os.environ.setdefault("WANDB_PROJECT", logging.project_name)
    if "mlflow" in active:
        uri = mlflow_uri(logging, run_dir)
        os.environ.update(
            MLFLOW_TRACKING_URI=uri,
            MLFLOW_EXPERIMENT_NAME=logging.project_name,
            MLFLOW_DISABLE_TELEMETRY="true",
        )
        if uri.startswith("file:"):
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3: the file store is opt-in
        import mlflow

        mlflow.set_tracking_uri(uri)  # over any URI set earlier in this process (an earlier job of a sweep)
    if "trackio" in active:
        _point_trackio_at(run_dir / "trackio")


def _point_trackio_at(folder: Path) -> None:
    """trackio's storage folder for this run: TRACKIO_DIR for a first import, and the paths its loaded modules hold."""
    os.environ["TRACKIO_DIR"] = str(folder)
    paths = {"TRACKIO_DIR": folder, "MEDIA_DIR": folder / "media", "ARTIFACTS_DIR": folder / "artifacts"}
    for name, module in list(sys.modules.items()):
        if name == "trackio" or name.startswith("trackio."):
            for attr, path in paths.items():
                if isinstance(getattr(module, attr, None), Path):
                    setattr(module, attr, path)


@contextmanager
def _hub_offline() -> Iterator[None]:
    """The Hugging Face Hub client refuses every request inside (trackio.init asks it for the user's name)."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def trackio_metrics_callback() -> Any:
    """``TrackioMetrics``: transformers' TrackioCallback logging metrics.jsonl's keys at the optimizer step."""
    from transformers.integrations import TrackioCallback

    class TrackioMetrics(TrackioCallback):
        def setup(self, args, state, model, **kwargs):
            with _hub_offline():
                super().setup(args, state, model, **kwargs)

        def on_log(self, args, state, control, model=None, logs=None, **kwargs):
            if not self._initialized:
                self.setup(args, state, model)
            if state.is_world_process_zero and logs:
                self._trackio.log({k: v for k, v in logs.items() if _is_number(v)}, step=state.global_step)

    return TrackioMetrics()


def _integrations() -> tuple[type, ...]:
    from transformers.integrations import INTEGRATION_TO_CALLBACK

    return tuple(INTEGRATION_TO_CALLBACK[name] for name in PACKAGES if name in INTEGRATION_TO_CALLBACK)


class TrackerRuns:
    """The trainer's tracker callbacks: rows logged outside the trainer (the held-out evaluations before and after
    training) reach them at their step, and their runs close at ``close`` (their ``on_train_end`` is held)."""

    def __init__(self, trainer: Any):
        from transformers.integrations import TrackioCallback

        self.trainer = trainer
        callbacks = trainer.callback_handler.callbacks
        for i, callback in enumerate(callbacks):
            if type(callback) is TrackioCallback:
                callbacks[i] = trackio_metrics_callback()
        self.callbacks: list[Any] = [c for c in callbacks if isinstance(c, _integrations())]
        self.held: dict[int, tuple[Any, Any, Any, dict]] = {}
        for callback in self.callbacks:
            callback.on_train_end = self._holder(callback)  # an instance attribute over the class's method

    def _holder(self, callback: Any):
        def hold(args, state, control, **kwargs):
            self.held[id(callback)] = (args, state, control, kwargs)

        return hold

    def log(self, row: dict[str, Any]) -> None:
        """One row of metrics.jsonl (its numbers; ``step`` is the trainer's current step) to every tracker."""
        t = self.trainer
        logs = {k: v for k, v in row.items() if k != "step" and _is_number(v)}
        for callback in self.callbacks:
            if logs:
                callback.on_log(t.args, t.state, t.control, logs=logs, model=t.model)

    def close(self) -> None:
        """End every tracker's run (what its on_train_end does), once; also when training stopped early."""
        t = self.trainer
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            del callback.on_train_end  # the class's method again
            args, state, control, kwargs = self.held.pop(id(callback), (t.args, t.state, t.control, {}))
            callback.on_train_end(args, state, control, **{"model": t.model, **kwargs})


def describe(logging: LoggingSettings) -> list[str]:
    """``rlpost show``'s lines: where the run's metrics go."""
    project = logging.project_name
    where = {
        "tensorboard": "<run>/tensorboard/ (event files; transformers' train/ prefix)",
        "wandb": f"{logging.wandb_run_mode}, project {project}, <run>/wandb/"
        + (" (wandb sync later)" if logging.wandb_run_mode == "offline" else ""),
        "mlflow": f"{logging.mlflow_uri or 'file:<run>/mlruns'} (local file store), experiment {project}, "
        "metrics.jsonl's keys at each step",
        "trackio": f"<run>/trackio/{project}.db (local SQLite, no Space), project {project}, metrics.jsonl's keys "
        "at each step",
    }
    lines = ["  metrics.jsonl  every training log and held-out evaluation (always)"]
    lines += [f"  {name:<13}  {where[name]}" for name in logging.active_trackers()]
    if not logging.active_trackers():
        lines.append("  trackers       none (logging.trackers=[])")
    return lines
