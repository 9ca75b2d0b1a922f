"""The Mined Factor Databases of formula-discovery runs, side by side (QuantEvolver, seed 004 #20).

    python bench/factor_pools.py runs/methods/quantevolver-20 runs/methods/quantevolver-grpo-20

Reads each run's last ``checkpoints/checkpoint-N/rlpost_state.pt`` (the ``data.env`` state) and prints, per
run: the number of factors, their mean IC over the whole synthetic panel and over its last 60 days, the
mean pairwise |corr| between them (lower: more complementary), and the IC of the equal-weight composite
(the mean of the factors' cross-sectional z-scores) over those last 60 days.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import torch

from rlpost.data.formula_panel import WARMUP, cross_sectional_z, daily_corr, evaluate_factor, factor_ic, make_panel


def database(run: Path) -> list[str]:
    checkpoints = sorted((run / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    if not checkpoints:
        raise SystemExit(f"{run}: no checkpoints/checkpoint-N (train with train.save_steps)")
    state = torch.load(checkpoints[-1] / "rlpost_state.pt", weights_only=True)
    return list(state["data.env"]["expressions"])


def pool_row(name: str, factors: list[str]) -> str:
    panel = make_panel()
    whole, late = slice(WARMUP, panel.days - 1), slice(panel.days - 61, panel.days - 1)
    if not factors:
        return f"| {name} | 0 | - | - | - | - |"
    values = {f: evaluate_factor(f, panel, whole) for f in factors}
    ic_whole = sum(factor_ic(v, panel, whole) for v in values.values()) / len(factors)
    late_values = {f: evaluate_factor(f, panel, late) for f in factors}
    ic_late = sum(factor_ic(v, panel, late) for v in late_values.values()) / len(factors)
    pairs = list(itertools.combinations(factors, 2))
    corr = sum(abs(daily_corr(values[a], values[b])) for a, b in pairs) / len(pairs) if pairs else float("nan")
    composite = sum(cross_sectional_z(v) for v in late_values.values()) / len(factors)
    return (
        f"| {name} | {len(factors)} | {ic_whole:+.4f} | {ic_late:+.4f} | {corr:.3f} | "
        f"{factor_ic(composite, panel, late):+.4f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    print(
        "| run | factors | mean IC, whole panel | mean IC, last 60 days | mean pairwise abs corr | composite IC, last 60 days |"
    )
    print("|---|---|---|---|---|---|")
    for run in args.runs:
        print(pool_row(run.name, database(run)))
    for run in args.runs:
        print(f"\n{run.name}: " + "; ".join(database(run)))


if __name__ == "__main__":
    main()
