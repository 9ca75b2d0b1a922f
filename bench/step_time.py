"""Step time of rlpost's RLPostTrainer against plain TRL GRPOTrainer on the same GRPO job.

Method. Both trainers get the same composed config (``rlpost.build.build_run(rlpost.cli.compose(...))``
as in tests/trainer_utils.py): the same model weights, the default data config's fixed prompts,
seed, group size, completion length, lr 1e-5, fp32 on CPU. TRL runs with the ``loss_type`` (and
settings) that rlpost's bundle reproduces exactly (tests/test_trl_equivalence.py), so both do the
same work and generate the same completions. Each run is a fresh subprocess (peak RSS is per run,
``ru_maxrss`` in the child). Repetitions alternate TRL and rlpost in ABBA order (TRL first on even
repetitions, rlpost first on odd ones), so drift on a shared machine hits both alike.

Both trainers are subclassed by the same timing mixin, which adds up per optimizer step:
- step: wall time between consecutive ``on_step_end`` callbacks (optimizer, logging and data included);
- gen: time in ``_generate`` (tokenize, ``model.generate``, decode) and the completion tokens it made;
- score: the rest of ``_generate_and_score_completions`` (rewards, advantages, bookkeeping);
- loss: ``_compute_loss`` minus its log-prob forward (TRL's ``loss_type`` branch vs rlpost's components);
- CPU: process CPU time per step (``time.process_time``), less hurt by other jobs than wall time,
  especially with ``--threads 1`` (with more threads, OpenMP's spin-waits count too);
- train: ``training_step`` minus ``_generate_and_score_completions`` (forward + backward), with the
  prompt + completion tokens (attention-mask ones, not padding) that went through it.
The first step is warm-up and excluded. Per run: medians over steps for s/step and ms/step of
scoring, token sums over time sums for tok/s; per configuration: the median over repetitions.
The rlpost/TRL row is the ratio of those medians; the paired ratios (same repetition) are listed too.

Usage: .venv/bin/python bench/step_time.py [--model tiny-random] [--algorithms grpo,dapo] [--reps 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# rlpost bundle -> (overrides that switch off what TRL's loss type lacks, TRL GRPOConfig settings)
TRL_EQUIVALENT = {
    "grpo": ([], dict(loss_type="grpo", scale_rewards="group")),
    "dr_grpo": ([], dict(loss_type="dr_grpo", scale_rewards="none")),
    "dapo": (
        ["algorithm.dynamic_sampling=false", "algorithm.overlong.soft_penalty=false"],
        dict(loss_type="dapo", scale_rewards="group", epsilon_high=0.28),
    ),  # fmt: skip
    "gspo": ([], dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4)),
    "cispo": ([], dict(loss_type="cispo", epsilon_high=5.0)),
}
TRAINERS = ("TRL", "rlpost")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m", choices=["smollm2-135m", "tiny-random"])
    p.add_argument("--steps", type=int, default=4, help="optimizer steps per run; the first is warm-up")
    p.add_argument("--reps", type=int, default=3, help="repetitions of each (algorithm, trainer)")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--completions-per-step", type=int, default=8)
    p.add_argument("--max-completion-length", type=int, default=32)
    p.add_argument("--algorithms", default="grpo", help=f"comma list of {', '.join(TRL_EQUIVALENT)}")
    p.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"), help="markdown file to append to")
    p.add_argument("--no-write", action="store_true", help="print the table only")
    p.add_argument("--threads", type=int, default=0, help="torch threads in each run (0: torch's default)")
    p.add_argument("--child", choices=TRAINERS, help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    unknown = [a for a in args.algorithms if a not in TRL_EQUIVALENT]
    if unknown or args.steps < 2:
        p.error(f"unknown algorithm {unknown[0]!r}" if unknown else "--steps must be >= 2 (step 1 is warm-up)")
    return args


# ---- child: one training run -----------------------------------------------------------------
def child(args: argparse.Namespace, algorithm: str) -> dict:
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlpost.build import build_run
    from rlpost.cli import compose
    from rlpost.data import load_datasets
    from rlpost.models import load_model, load_tokenizer
    from rlpost.trainer import RLPostTrainer

    if args.threads:
        torch.set_num_threads(args.threads)
    extra, trl_settings = TRL_EQUIVALENT[algorithm]
    overrides = [f"model={args.model}", f"algorithm={algorithm}", "hardware=cpu", f"train.steps={args.steps}",
                 f"train.num_generations={args.num_generations}", "train.learning_rate=1e-5",
                 f"train.completions_per_step={args.completions_per_step}",
                 f"train.max_completion_length={args.max_completion_length}",
                 "logging.tensorboard=false", "logging.progress=false", *extra]  # fmt: skip
    run = build_run(compose(overrides))
    out_dir = tempfile.mkdtemp(prefix="rlpost-bench-")
    kwargs = run.grpo_config_kwargs(out_dir)
    if args.child == "TRL":
        kwargs.update(trl_settings)
    acc, steps, texts = defaultdict(float), [], []

    class Timed:  # the same timing wrapper around both trainers
        def _generate(self, prompts):
            t = time.perf_counter()
            out = super()._generate(prompts)
            acc["gen_s"] += time.perf_counter() - t
            acc["gen_tokens"] += sum(len(ids) for ids in out[1])
            texts.extend(str(c) for c in out[3])
            return out

        def _generate_and_score_completions(self, inputs):
            t = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            acc["gen_score_s"] += time.perf_counter() - t
            return out

        def training_step(self, model, inputs, num_items_in_batch):
            t = time.perf_counter()
            out = super().training_step(model, inputs, num_items_in_batch)
            acc["train_step_s"] += time.perf_counter() - t
            return out

        def _compute_loss(self, model, inputs):
            t, logps_before = time.perf_counter(), acc["all_logps_s"]
            out = super()._compute_loss(model, inputs)
            acc["loss_s"] += time.perf_counter() - t
            acc["logps_s"] += acc["all_logps_s"] - logps_before  # the log-prob forward of the loss only
            return out

        def _get_per_token_logps_and_entropies(self, *a, **kw):
            t = time.perf_counter()
            out = super()._get_per_token_logps_and_entropies(*a, **kw)
            acc["all_logps_s"] += time.perf_counter() - t
            return out

        def compute_loss(self, model, inputs, **kw):
            acc["train_tokens"] += float(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
            return super().compute_loss(model, inputs, **kw)

    class StepClock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.last = getattr(self, "last", None) or (time.perf_counter(), time.process_time())

        def on_step_end(self, a, state, control, **kw):
            now = (time.perf_counter(), time.process_time())
            steps.append({"step_s": now[0] - self.last[0], "cpu_s": now[1] - self.last[1], **acc})
            self.last = now
            acc.clear()

    common = dict(
        model=load_model(run.model),
        args=GRPOConfig(**kwargs),
        train_dataset=load_datasets(run.data)[0],
        processing_class=load_tokenizer(run.model),
        callbacks=[StepClock()],
    )
    if args.child == "TRL":
        trainer = type("TimedGRPO", (Timed, GRPOTrainer), {})(reward_funcs=run.reward.funcs, **common)
    else:
        samples: list = []
        trainer = type("TimedRLPost", (Timed, RLPostTrainer), {})(run=run, sample_sink=samples.extend, **common)
    trainer.train()
    return {
        "steps": steps,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch_threads": torch.get_num_threads(),
        "completions_hash": hashlib.sha1(json.dumps(texts).encode()).hexdigest(),
    }


# ---- parent: alternate runs, summarize -------------------------------------------------------
def summarize_run(result: dict) -> dict:
    timed = result["steps"][1:]  # step 1 is warm-up
    sums = {k: sum(s.get(k, 0.0) for s in timed) for k in ("gen_s", "gen_tokens", "gen_score_s", "train_step_s")}
    train_s = sums["train_step_s"] - sums["gen_score_s"]
    return {
        "step_s": statistics.median(s["step_s"] for s in timed),
        "gen_tok_s": sums["gen_tokens"] / max(sums["gen_s"], 1e-9),
        "cpu_s": statistics.median(s["cpu_s"] for s in timed),
        "score_ms": statistics.median(1e3 * (s.get("gen_score_s", 0) - s.get("gen_s", 0)) for s in timed),
        "loss_ms": statistics.median(1e3 * (s.get("loss_s", 0) - s.get("logps_s", 0)) for s in timed),
        "train_tok_s": sum(s.get("train_tokens", 0.0) for s in timed) / max(train_s, 1e-9),
        "peak_rss_mb": result["peak_rss_mb"],
    }


def machine(threads: int, load: float) -> str:
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown CPU"
    import torch
    import transformers
    import trl

    cores = f"{len(os.sched_getaffinity(0))} usable of {os.cpu_count()} logical cores"
    return (
        f"{cpu}; {cores}; load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end; torch {torch.__version__} "
        f"({threads} thread{'s' if threads > 1 else ''} per run), transformers {transformers.__version__}, trl {trl.__version__}; "
        f"Python {platform.python_version()}; {datetime.now().strftime('%Y-%m-%d %H:%M')}"
    )


COLUMNS = [("step_s", "s/step", "{:.3f}"), ("cpu_s", "CPU s/step", "{:.3f}"), ("gen_tok_s", "gen tok/s", "{:.1f}"),
           ("score_ms", "score ms/step", "{:.1f}"), ("loss_ms", "loss ms/step", "{:.1f}"),
           ("train_tok_s", "train tok/s", "{:.1f}"), ("peak_rss_mb", "peak RSS MB", "{:.0f}")]  # fmt: skip


def table(runs: dict, args: argparse.Namespace) -> str:
    lines = [
        "| algorithm | trainer | " + " | ".join(title for _, title, _ in COLUMNS) + " | s/step per rep |",
        "|---" * (len(COLUMNS) + 3) + "|",
    ]
    for algo in args.algorithms:
        med = {}
        for trainer in TRAINERS:
            rows = runs[algo, trainer]
            med[trainer] = {k: statistics.median(r[k] for r in rows) for k, _, _ in COLUMNS}
            cells = [fmt.format(med[trainer][k]) for k, _, fmt in COLUMNS]
            per_rep = ", ".join(f"{r['step_s']:.3f}" for r in rows)
            lines.append(f"| {algo} | {trainer} | " + " | ".join(cells) + f" | {per_rep} |")
        ratios = [f"{med['rlpost'][k] / med['TRL'][k]:.3f}x" if med["TRL"][k] else "n/a" for k, _, _ in COLUMNS]
        paired = [o["step_s"] / t["step_s"] for t, o in zip(runs[algo, "TRL"], runs[algo, "rlpost"])]
        lines.append(f"| {algo} | rlpost/TRL | " + " | ".join(ratios) + " | paired "
                     + ", ".join(f"{x:.3f}" for x in paired) + " |")  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        result = child(args, args.algorithms[0])
        Path(args.child_out).write_text(json.dumps(result))
        return 0
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}
    base = [f"--model={args.model}", f"--steps={args.steps}", f"--num-generations={args.num_generations}",
            f"--completions-per-step={args.completions_per_step}", f"--threads={args.threads}",
            f"--max-completion-length={args.max_completion_length}"]  # fmt: skip
    plan = [(rep, algo, t) for rep in range(args.reps) for algo in args.algorithms
            for t in (TRAINERS if rep % 2 == 0 else TRAINERS[::-1])]  # fmt: skip
    load = os.getloadavg()[0]
    runs, hashes = defaultdict(list), defaultdict(set)
    with tempfile.TemporaryDirectory() as tmp, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    ) as progress:  # fmt: skip
        task = progress.add_task("runs", total=len(plan))
        for i, (rep, algo, trainer) in enumerate(plan):
            progress.update(task, description=f"rep {rep + 1}/{args.reps} {algo} {trainer:6}")
            out, log = Path(tmp) / f"{i}.json", Path(tmp) / f"{i}.log"
            cmd = [sys.executable, __file__, *base, f"--algorithms={algo}", f"--child={trainer}", f"--child-out={out}"]
            with open(log, "w") as fh:
                code = subprocess.call(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
            if code:
                sys.stderr.write(log.read_text()[-4000:])
                progress.stop()
                print(f"run {trainer} {algo} (rep {rep + 1}) failed with exit code {code}", file=sys.stderr)
                return 1
            result = json.loads(out.read_text())
            runs[algo, trainer].append(summarize_run(result))
            hashes[algo, rep].add(result["completions_hash"])
            progress.advance(task)
    differ = sorted({algo for (algo, _), h in hashes.items() if len(h) > 1})
    header = (
        f"## {args.model}, {', '.join(args.algorithms)}: {args.reps} reps x {args.steps} steps "
        f"(first excluded), G={args.num_generations}, {args.completions_per_step} completions/step, "
        f"{args.max_completion_length} new tokens, fp32 CPU\n\n{machine(result['torch_threads'], load)}\n"
    )
    note = "\nSame completions in TRL and rlpost runs: " + (f"NO for {', '.join(differ)}" if differ else "yes") + "\n"
    report = f"{header}\n{table(runs, args)}\n{note}"
    print(report)
    if not args.no_write:
        with open(args.out, "a") as fh:
            fh.write("\n" + report)
        print(f"appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
