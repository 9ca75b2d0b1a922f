"""PPO-clip vs PPO-OR (seed 000 #29) under GAE on the same task, seed and batch, for equal steps on CPU.

Runs ``recipe=ppo`` and ``recipe=ppo_or`` (they differ only in the policy loss) one after the other
through the real CLI, each into ``runs/ppo/<label>`` (a finished run, with summary.json, is reused),
then prints a markdown table: mean reward over the first half of the steps -> the second half, the
value loss and the loss's or/* diagnostics the same way, held-out accuracy (when --eval-size > 0) and
seconds per step. ``--write`` also writes the table to bench/PPO.md.

    python bench/ppo_vs_ppo_or.py [--model smollm2-135m|tiny-random] [--steps 6] [--completions 8]
                                  [--max-completion-length 32] [--eval-size 0] [--seed 0] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METRICS = ["reward", "value/loss", "value/mean", "or/residual_mean", "or/overshoot_frac", "or/log_ratio_abs_mean"]


def run(label: str, overrides: list[str], fresh: bool) -> Path:
    out = ROOT / "runs" / "ppo" / label
    if (out / "summary.json").exists() and not fresh:
        return out
    cmd = [sys.executable, "-m", "rlpost.cli", "train", *overrides, f"hydra.run.dir={out}"]
    print("$", " ".join(cmd[2:]), flush=True)
    started = time.time()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run(cmd, cwd=ROOT, check=True, env=env)
    print(f"  {label}: {time.time() - started:.0f} s", flush=True)
    return out


def halves(values: list[float]) -> str:
    if not values:
        return "-"
    mid = max(len(values) // 2, 1)
    first, second = values[:mid], values[mid:] or values[:mid]
    return f"{sum(first) / len(first):.3f} -> {sum(second) / len(second):.3f}"


def row(label: str, path: Path) -> str:
    summary = json.loads((path / "summary.json").read_text())
    logs = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    steps = [log for log in logs if "grad_norm" in log]
    cells = [halves([s[k] for s in steps if k in s]) for k in METRICS]
    before, after = summary.get("before", {}), summary.get("after", {})
    acc = f"{before['eval/accuracy']:.2f} -> {after['eval/accuracy']:.2f}" if "eval/accuracy" in after else "-"
    return f"| {label} | {len(steps)} | " + " | ".join(cells) + f" | {acc} | {summary['seconds_per_step']:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--completions", type=int, default=8, help="completions per step (4 per prompt)")
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--eval-size", type=int, default=0, help="held-out prompts before/after (0 = no eval)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fresh", action="store_true", help="rerun even if a finished run exists")
    parser.add_argument("--write", action="store_true", help="write the table to bench/PPO.md")
    args = parser.parse_args()
    common = [
        f"model={args.model}",
        f"seed={args.seed}",
        f"train.steps={args.steps}",
        f"train.completions_per_step={args.completions}",
        f"train.max_completion_length={args.max_completion_length}",
        f"eval.at_start={str(args.eval_size > 0).lower()}",
        f"eval.at_end={str(args.eval_size > 0).lower()}",
        f"eval.size={max(args.eval_size, 1)}",
        "logging.trackers=[]",
        "logging.plots=false",
        "logging.progress=false",
    ]
    tag = f"{args.model}-s{args.steps}-n{args.completions}-seed{args.seed}"
    runs = {name: run(f"{name}-{tag}", [f"recipe={name}", *common], args.fresh) for name in ("ppo", "ppo_or")}
    header = "| run | steps | " + " | ".join(METRICS) + " | eval/accuracy | s/step |"
    lines = [header, "|" + "---|" * (len(METRICS) + 4)] + [row(name, path) for name, path in runs.items()]
    note = (
        f"{args.model}, basic_arithmetic, exact-correctness reward, {args.completions} completions per step "
        f"(4 per prompt), {args.max_completion_length} new tokens, 2 PPO epochs per batch, seed {args.seed}. "
        "Columns: mean over the first half of the steps -> mean over the second half."
    )
    table = "\n".join(lines) + "\n\n" + note + "\n"
    print(table)
    if args.write:
        (ROOT / "bench" / "PPO.md").write_text(
            "# PPO-clip vs PPO-OR under GAE (CPU)\n\nWritten by `python bench/ppo_vs_ppo_or.py --write`.\n\n" + table
        )


if __name__ == "__main__":
    main()
