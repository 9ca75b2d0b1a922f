"""PRISM (seed 000 #13) vs GRPO on the weighted sum of the same two rewards: the alignment tax.

Trains, one run at a time, on SmolLM2-135M with LoRA (conf/recipe/prism.yaml): the positive policy of each
reward term (correctness, brevity), the global negative policy (conf/recipe/prism_negative.yaml) and the
GRPO baseline on the weighted sum (1 * correctness + 1 * brevity), all at equal steps; then scores every
policy with `rlpost eval` on the same held-out prompts (greedy): the base, the specialists, GRPO, and the
PRISM compositions (logit space without and with the negative policy, and weight space through
`rlpost merge`). The alignment tax of a policy on a reward is the specialist's score minus its score.
Runs go to ``runs/methods/prism-*``; a finished run or eval is not redone. The table is written to
``bench/METHODS.md``.

    python bench/prism.py [--steps 12] [--size 50] [--merge]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from method_experiments import COMMON, ROOT, RUNS, replace_section, run

TERMS = (
    "reward.terms=[{name: math_answer, weight: 1.0}, "
    "{name: length, weight: 1.0, params: {target: 10, unit: words, mode: over_only}}]"
)
KEYS = ("eval/math_answer", "eval/length")  # correctness (accuracy), brevity in [-1, 0]


def rlpost(args: list[str], out: Path) -> float:
    """Run ``rlpost <args>`` unless ``out`` exists; the seconds it took (0 when skipped)."""
    if out.exists():
        return json.loads((out.parent / "seconds.json").read_text())["seconds"]
    print("$ rlpost", " ".join(args), flush=True)
    started = time.time()
    subprocess.run([sys.executable, "-m", "rlpost.cli", *args], cwd=ROOT, check=True)
    seconds = time.time() - started
    (out.parent / "seconds.json").write_text(json.dumps({"seconds": seconds}) + "\n")
    return seconds


def evaluate(name: str, policy: list[str], size: int) -> tuple[dict, float]:
    folder = RUNS / "prism-eval" / name
    out = folder / "eval.json"
    folder.mkdir(parents=True, exist_ok=True)
    args = ["eval", *policy, "data=basic_arithmetic", TERMS, f"size={size}", "progress=false"]
    seconds = rlpost([*args, f"out={out}", f"hydra.run.dir={folder}"], out)
    return json.loads(out.read_text())["results"], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--size", type=int, default=50)
    parser.add_argument("--merge", action="store_true", help="also the weight-space composition (rlpost merge)")
    args = parser.parse_args()
    n = args.steps
    steps = [f"train.steps={n}", *COMMON]
    runs = {
        "correct": run(f"prism-correct-{n}", ["recipe=prism", *steps]),
        "brevity": run(f"prism-brevity-{n}", ["recipe=prism", "reward.terms.0.weight=0", "reward.terms.1.weight=1", *steps]),
        "negative": run(f"prism-negative-{n}", ["recipe=prism_negative", *steps]),
        "grpo": run(f"prism-grpo-{n}", ["recipe=prism", "reward.terms.1.weight=1", *steps]),
    }  # fmt: skip
    per_step = {k: json.loads((p / "summary.json").read_text())["seconds_per_step"] for k, p in runs.items()}
    pos = f"compose.positives=[{runs['correct']},{runs['brevity']}]"
    merged = RUNS / "prism-eval" / f"merged-{n}" / "model"
    if args.merge:  # needs ~2 GB of disk for the three merged adapters and the output
        merged.parent.mkdir(parents=True, exist_ok=True)
        merge_args = ["merge", "method=task_arithmetic", "model=smollm2-135m", "weights=[1.0,1.0,-0.5]",
                      f"models=[{runs['correct']},{runs['brevity']},{runs['negative']}]"]  # fmt: skip
        rlpost([*merge_args, f"out={merged}", f"hydra.run.dir={merged.parent}"], merged)
    rows = [  # label, eval args, training s/step (None: no training of its own)
        ("base SmolLM2-135M (no training)", ["model=smollm2-135m"], None),
        ("specialist: correctness", [f"run={runs['correct']}"], per_step["correct"]),
        ("specialist: brevity", [f"run={runs['brevity']}"], per_step["brevity"]),
        ("negative policy alone", [f"run={runs['negative']}"], per_step["negative"]),
        ("GRPO on 1 * correctness + 1 * brevity", [f"run={runs['grpo']}"], per_step["grpo"]),
        ("PRISM logits, w = [1, 1], no negative", ["model=smollm2-135m", pos, "compose.gamma=0"], None),
        ("PRISM logits, w = [1, 1], gamma 0.5", ["model=smollm2-135m", pos, f"compose.negative={runs['negative']}"], None),
        ("PRISM logits, w = [1, 0.5], gamma 0.5 (less brevity)",
         ["model=smollm2-135m", pos, f"compose.negative={runs['negative']}", "compose.weights=[1.0,0.5]"], None),
        ("PRISM logits, w = [1, 0.5], no negative", ["model=smollm2-135m", pos, "compose.gamma=0", "compose.weights=[1.0,0.5]"],
         None),
        ("PRISM logits, w = [1, 0.25], gamma 0.5",
         ["model=smollm2-135m", pos, f"compose.negative={runs['negative']}", "compose.weights=[1.0,0.25]"], None),
    ]  # fmt: skip
    if args.merge:
        rows.append(("PRISM merge, task arithmetic [1, 1, -0.5]", ["model=hf", f"model.path={merged}"], None))
    results = {label: evaluate(f"{i}-{n}", policy, args.size) for i, (label, policy, _) in enumerate(rows)}
    best = {k: results[label][0][k] for k, label in zip(KEYS, ("specialist: correctness", "specialist: brevity"))}
    prism_train = per_step["correct"] + per_step["brevity"] + per_step["negative"]
    lines = [
        f"### PRISM (seed 000 #13) vs GRPO on the weighted sum: alignment tax, {n} steps per policy",
        "",
        f"SmolLM2-135M + LoRA (r 16, lr 2e-4), basic_arithmetic, 16 completions/step, seed 0; every row scored by "
        f"`rlpost eval` on the same {args.size} held-out prompts (greedy, 32 new tokens). Correctness = "
        "eval/math_answer (accuracy), brevity = eval/length (-min(1, max(0, words - 10) / 10)). Tax = the "
        f"specialist's score minus the row's (lower is better). PRISM trains 3 policies ({prism_train:.1f} s per "
        "step of all three together) where GRPO trains one; a composed token costs K + 2 = 4 forwards (eval s).",
        "",
        "| policy | train s/step | correctness | brevity | tax: correctness | tax: brevity | eval s |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, _, train in rows:
        r, seconds = results[label]
        taxes = [f"{best[k] - r[k]:+.3f}" for k in KEYS]
        t = f"{train:.1f}" if train is not None else "-"
        lines.append(
            f"| {label} | {t} | {r[KEYS[0]]:.3f} | {r[KEYS[1]]:.3f} | {taxes[0]} | {taxes[1]} | {seconds:.0f} |"
        )
    section = "\n".join(lines) + "\n"
    print(section, flush=True)
    path = ROOT / "bench" / "METHODS.md"
    path.write_text(replace_section(path.read_text(), section))


if __name__ == "__main__":
    main()
