"""A run directory (DESIGN.md): resolved config, metrics.jsonl, samples.jsonl, checkpoints, plots, summary.

    <run>/config.yaml  overrides.yaml  metrics.jsonl  samples.jsonl  events.jsonl  checkpoints/  plots/*.png  summary.json

Files are appended line by line (jsonl) or written to a temp file and renamed, so a crash never
leaves a half-written summary or config.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf


class RunDirectory:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

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
        resolved = OmegaConf.to_container(cfg, resolve=True)
        resolved.pop("hydra", None)
        write_atomic(self.path / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(resolved)))
        write_atomic(self.path / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(list(overrides))))

    def append_metrics(self, row: dict[str, Any]) -> None:
        append_jsonl(self.metrics_file, [row])

    def append_samples(self, rows: list[dict[str, Any]]) -> None:
        append_jsonl(self.samples_file, rows)

    def append_event(self, row: dict[str, Any]) -> None:
        """One line of events.jsonl: a safety event (rollback, skipped step, LoRA merge)."""
        append_jsonl(self.path / "events.jsonl", [row])

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.path / "summary.json", json.dumps(summary, indent=2, default=_json_default) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        return read_jsonl(self.metrics_file)


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
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return str(value)
