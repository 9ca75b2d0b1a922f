"""A Hydra callback that writes a sweep summary table when a multirun ends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

COLUMNS = ("eval/accuracy", "eval/reward", "eval/mean_length")


def summarize_sweep(sweep_dir: Path) -> str:
    """Markdown table over every job folder of a sweep holding a summary.json."""
    rows = []
    for summary_file in sorted(sweep_dir.glob("*/summary.json"), key=lambda p: p.parent.name):
        summary = json.loads(summary_file.read_text())
        overrides_file = summary_file.parent / "overrides.yaml"  # rlpost's own (redacted); no .hydra/ copy
        overrides = (
            " ".join(line[2:].strip() for line in overrides_file.read_text().splitlines() if line.startswith("- "))
            if overrides_file.exists()
            else ""
        )
        after, before = summary.get("after", {}), summary.get("before", {})
        cells = [summary_file.parent.name, overrides or "(defaults)"]
        cells += [_fmt(before.get(c)) + " -> " + _fmt(after.get(c)) for c in COLUMNS]
        cells.append(_fmt(summary.get("seconds_per_step")))
        rows.append(cells)
    header = ["job", "overrides", *COLUMNS, "s/step"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


class SweepSummaryCallback(Callback):
    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir():
            table = summarize_sweep(sweep_dir)
            (sweep_dir / "sweep_summary.md").write_text(table)
            print(table)
