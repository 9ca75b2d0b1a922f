"""The calculator learning result (issue 18): GRPO with a calculator tool against GRPO without one, same data.

    python bench/env_calculator.py [--model qwen2.5-coder-0.5b] [--steps 15] [--eval-size 50]

Task: reasoning-gym basic_arithmetic as 3-digit x 3-digit multiplication (the question alone). Two runs of
``rlpost train`` (one at a time), each with held-out greedy evaluation before and after training:
- with the tool: ``data/env=calculator reward=env`` (chat-template tool calls when the model's template has
  them, ``--tool-format``);
- without: ``reward=math_answer`` on the same prompts.
Prints a table of held-out accuracy, the share of episodes that call the tool and the valid-call rate,
before -> after, and appends it to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASK = ["data.task_params.min_digits=3", "data.task_params.max_digits=3", "data.task_params.operators=[*]",
        "data.template='{question}'"]  # fmt: skip


def train(name: str, overrides: list[str], out: Path) -> dict:
    run_dir = out / name.replace(" ", "_")
    cmd = [
        sys.executable,
        "-m",
        "rlpost.cli",
        "train",
        *overrides,
        f"hydra.run.dir={run_dir}",
        "logging.progress=false",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    started = time.time()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{name} failed:\n{done.stderr[-4000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["minutes"] = (time.time() - started) / 60
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--eval-size", type=int, default=50)
    p.add_argument("--tool-format", default="chat_template", choices=["tags", "chat_template"])
    p.add_argument("--learning-rate", default="1e-5")
    p.add_argument("--out", default=str(ROOT / "outputs" / "env_calculator"))
    args = p.parse_args()
    common = [f"model={args.model}", *TASK, f"train.steps={args.steps}", f"train.learning_rate={args.learning_rate}",
              "train.num_generations=4", "train.completions_per_step=8", "train.max_completion_length=64",
              f"data.eval_size={args.eval_size}", f"eval.size={args.eval_size}", "eval.batch_size=25",
              "logging.plots=false", "logging.trackers=[]"]  # fmt: skip
    runs = {
        "with the calculator": [
            *common,
            "data/env=calculator",
            "reward=env",
            f"data.env.tool_format={args.tool_format}",
        ],
        "without a tool": [*common, "reward=math_answer"],
    }
    results = {name: train(name, overrides, Path(args.out)) for name, overrides in runs.items()}
    rows = ["| run | held-out accuracy | episodes calling the tool | valid tool calls | s/step | minutes |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for name, s in results.items():
        b, a = s["before"], s["after"]
        use = (
            f"{b.get('eval/env/tool_use', 0):.2f} -> {a.get('eval/env/tool_use', 0):.2f}"
            if "eval/env/tool_use" in a
            else "-"
        )
        valid = (f"{b['eval/env/valid_call_rate']:.2f} -> {a['eval/env/valid_call_rate']:.2f}"
                 if "eval/env/valid_call_rate" in a else "-")  # fmt: skip
        rows.append(f"| {name} | {b['eval/accuracy']:.2f} -> {a['eval/accuracy']:.2f} | {use} | {valid} | "
                    f"{s['seconds_per_step']:.1f} | {s['minutes']:.1f} |")  # fmt: skip
    table = "\n".join(rows)
    header = (f"\n## Calculator learning result (issue 18), {time.strftime('%Y-%m-%d')}\n\n`python bench/env_calculator.py "
              f"--model {args.model} --steps {args.steps} --eval-size {args.eval_size} --tool-format {args.tool_format} "
              f"--learning-rate {args.learning_rate}`: "
              f"{args.model}, 3-digit x 3-digit multiplication, GRPO G=4, 8 completions/step, lr {args.learning_rate}, "
              f"{args.steps} steps; held-out greedy evaluation on {args.eval_size} prompts before -> after.\n\n")  # fmt: skip
    print(header + table)
    with open(ROOT / "bench" / "RESULTS.md", "a") as fh:
        fh.write(header + table + "\n")


if __name__ == "__main__":
    main()
