"""A run directory (DESIGN.md): resolved config, metrics.jsonl, samples.jsonl, checkpoints, plots, summary.

    <run>/config.yaml  overrides.yaml  metrics.jsonl  samples.jsonl  events.jsonl  checkpoints/  plots/*.png  summary.json
          eval_before.json  eval_items_before.json  eval_items.json  (per held-out prompt: index, score, reward, completion)

Files are appended line by line (jsonl) or written to a temp file and renamed, so a crash never
leaves a half-written summary or config. With several processes the main one alone writes them
(rlpost/runs/ranks.py). A run directory removed while the run goes on stops the run with one line
(``RunStopped``) instead of a traceback or a silently recreated folder.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlpost.core.errors import RunStopped
from rlpost.runs.ranks import is_main

EVAL_ITEMS_BEFORE, EVAL_ITEMS = "eval_items_before.json", "eval_items.json"  # the held-out prompts one by one
# what one attempt at a run logs; a fresh start clears an earlier attempt's (``clear_attempt``)
ATTEMPT_FILES = (
    "metrics.jsonl",
    "samples.jsonl",
    "events.jsonl",
    "summary.json",
    "eval_before.json",
    EVAL_ITEMS_BEFORE,
    EVAL_ITEMS,
)
ATTEMPT_FOLDERS = ("plots", "rollouts", "tensorboard", "checkpoints/best")


class RunDirectory:
    """The run's files. In a multi-process launch every rank computes the same summary and metrics;
    only the main process writes them (rlpost/runs/ranks.py), so two ranks never race on one file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def writes(self) -> bool:
        return is_main()

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def plots(self) -> Path:
        return self.path / "plots"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def samples_file(self) -> Path:
        return self.path / "samples.jsonl"

    def write_config(self, cfg: Any, overrides: list[str]) -> None:
        from rlpost.core.secrets import redact_override, redacted_yaml

        if not self.writes:
            return
        write_atomic(self.path / "config.yaml", redacted_yaml(cfg))  # secrets redacted (rlpost/core/secrets.py)
        redacted = [redact_override(o) for o in overrides]
        write_atomic(self.path / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(redacted)))

    def truncate_after(self, step: int) -> None:
        """On resume from checkpoint ``step``: drop what a killed launch logged after it, so
        metrics.jsonl and samples.jsonl hold each step once (samples of step k+1 carry step k)."""
        if not self.writes:
            return
        for path, keep in ((self.metrics_file, lambda s: s <= step), (self.samples_file, lambda s: s < step)):
            rows = read_jsonl(path)
            kept = [row for row in rows if not isinstance(row.get("step"), int) or keep(row["step"])]
            if len(kept) != len(rows):
                write_atomic(path, "".join(json.dumps(row, default=_json_default) + "\n" for row in kept))

    def clear_attempt(self) -> list[str]:
        """A fresh start: remove what an earlier attempt in this directory logged (a launch killed
        before its first checkpoint), so no row shows twice. Returns the names removed."""
        if not self.writes:
            return []
        removed = [name for name in ATTEMPT_FILES if (self.path / name).is_file()]
        for name in removed:
            (self.path / name).unlink()
        for name in ATTEMPT_FOLDERS:
            if (self.path / name).is_dir():
                shutil.rmtree(self.path / name)
                removed.append(f"{name}/")
        return removed

    def append_metrics(self, row: dict[str, Any]) -> None:
        if self.writes:
            with self._present():
                append_jsonl(self.metrics_file, [row])

    def append_samples(self, rows: list[dict[str, Any]]) -> None:
        if self.writes:
            with self._present():
                append_jsonl(self.samples_file, rows)

    def append_event(self, row: dict[str, Any]) -> None:
        """One line of events.jsonl: a safety event (rollback, skipped step, LoRA merge)."""
        if self.writes:
            with self._present():
                append_jsonl(self.path / "events.jsonl", [row])

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.write_json("summary.json", summary)

    def write_json(self, name: str, value: Any) -> None:
        """``<run>/<name>`` as indented JSON, atomically, by the main process (summary.json, eval_before.json)."""
        if self.writes:
            with self._present():
                write_atomic(self.path / name, json.dumps(value, indent=2, default=_json_default) + "\n")

    @contextmanager
    def _present(self):
        """A write into a run directory that was removed mid-run stops the run with one line."""
        try:
            yield
        except FileNotFoundError:
            if self.path.is_dir():
                raise
            raise RunStopped(
                f"the run directory {self.path} was removed while the run was going, so the run stops "
                "(its checkpoints went with it; start again, or put it back and rerun with resume=auto)."
            ) from None

    def read_metrics(self) -> list[dict[str, Any]]:
        return read_jsonl(self.metrics_file)


def check_writable(folder: str | os.PathLike, key: str) -> None:
    """ConfigError unless ``folder`` (an output root or run directory, maybe not yet made) can be created
    and written: its nearest existing ancestor must be a writable directory. Nothing is created."""
    from rlpost.core.errors import ConfigError

    path = Path(str(folder).split("${", 1)[0] or ".").expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        raise ConfigError(f"{key}={folder}: {path} is a file, not a folder; choose another output folder.")
    try:  # a real probe: permission bits say nothing for root or on a read-only mount
        os.rmdir(tempfile.mkdtemp(prefix=".rlpost-write-probe-", dir=path))
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(
            f"{key}={folder}: cannot write in {path} ({reason}); choose a writable output folder."
        ) from None


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, default=_json_default) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_atomic(path: Path, text: str) -> None:
    """Write to a uniquely named temp file beside ``path``, then rename: a kill never leaves half a
    file, and two writers (ranks, sweep jobs) never rename each other's temp file away."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")  # umask-respecting
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return str(value)
