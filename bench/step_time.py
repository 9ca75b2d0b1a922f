"""Step time of rlpost against plain TRL GRPOTrainer, per-component overhead, and scaling (``make bench``).

Suites (``--suites trl,components,scaling``; each prints a markdown table, all are written to RESULTS.md):

- ``trl``: the same GRPO job through plain TRL in each configuration that keeps its results
  (``TRL_VARIANTS``: as shipped, and with ``torch_compile=True``; ``loss_type`` that rlpost's bundle
  reproduces exactly), through rlpost doing TRL's computation (``SAME_AS_TRL``: TRL's log-prob head, no
  shared prefix, PyTorch's matmuls; compared with plain TRL, the ratio is the cost of rlpost's seams) and
  through rlpost's defaults (the fast configuration: on CPU the faster of oneDNN's and PyTorch's matmuls,
  the shared prompt prefix in generation and training, packed rows, the compact log-prob head; compared
  with the fastest TRL configuration of the run). The completions hash shows whether they sampled the same text.
- ``long``: the trl suite at reasoning lengths, 8 completions of up to 256 tokens and 4 of up to 1024, on
  a prompt that asks for step-by-step working.
- ``components``: each custom component against the plain GRPO step on the same data: GEPO, Output
  Reset, trusted-direction projection (subspace built after step 1), CoRE, the rubric judge (SmolLM2 as
  judge), and AIR (against the same AIR data and reward without the regularizer).
- ``scaling``: rlpost's step along one dimension at a time against the smallest setting: group size
  G = 4, 8, 16 (2 prompts per step), completion length 32 to 256, model size (SmolLM2-135M, Qwen2.5-Coder-0.5B)
  and process count (1 vs 2, through the CLI).
- ``env``: the cost of the environment loop: a single-turn step against calculator episodes of one and of
  exactly two turns (``data/env``; each turn up to the same max_completion_length).
- ``matmul``: rlpost's defaults with ``train.cpu_matmul`` = aten, onednn and auto: whether ``auto``'s
  start-up timing (rlpost/generation/matmul_choice.py) lands on the faster kernel of this machine.

Method (bench/harness.py): every run is a fresh subprocess; in each repetition the variants of a suite
run in a rotated order so drift on a shared machine hits all alike; the first ``--warmup`` steps are
excluded; a run's s/step is the mean over its timed steps, and per variant the median over repetitions.
``% peak`` is the training phase's useful FLOP/s over the best fp32 matmul rate measured at the start with
the same thread count, by the faster of PyTorch's ``mm`` (MKL) and oneDNN (on AMD CPUs MKL runs its AVX2
path: oneDNN's rate is the machine's).
``% BW`` is decode's rate of memory traffic (every weight once per decode step, plus each row's KV cache)
over a STREAM-like copy bandwidth measured at the start: the memory-bandwidth bound of decoding.

Usage: .venv/bin/python bench/step_time.py [--suites trl] [--reps 3] [--steps 5] [--model tiny-random]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import cli_run, machine, matmul_peak_gflops, measured_run, memory_bandwidth_gbs, summarize_run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# glibc malloc keeps freed memory for reuse (no mmap chunks, no trimming, one arena): without it, every
# step faults several hundred MB of fresh pages back in, seconds of system time per step on this VM
# (bench/RESULTS.md). Applied to every variant, plain TRL included; --system-malloc turns it off.
KEEP_MEMORY = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 36)}
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
# plain TRL's configurations that keep its results (the same completions and rewards), fastest found so far
# first: the ratio of rlpost's defaults is always taken against the fastest of them (FASTEST_TRL)
TRL_VARIANTS = {
    "TRL": {},
    "TRL + torch_compile": {"torch_compile": True},  # inductor over the training forward/backward
}
FASTEST_TRL = "fastest TRL"
LONG_SHAPES = [(256, 8), (1024, 4)]  # (max new tokens, completions per step), G = 4
STEP_BY_STEP = ["data.template='{question} Think step by step, then give the final answer.'"]
# rlpost doing exactly TRL's computation: TRL's log-prob head, every row prefilled, PyTorch's matmuls
SAME_AS_TRL = ["train.logprob_head=trl", "train.shared_prefix=false", "train.cpu_matmul=aten", "train.kv_cache=dynamic"]
AIR_BASE = ["data=air_intents", "reward=choice_or_text", "algorithm/regularizers=[]"]  # 16 completions/step:
COMPONENTS = [  # (label, overrides, label of the variant it is compared with)
    ("grpo", [], None),
    ("gepo", ["algorithm=gepo"], "grpo"),
    ("output_reset", ["algorithm=grpo_or"], "grpo"),
    (
        "trusted_projection",
        ["algorithm/grad=[trusted_projection]", "algorithm.grad.trusted_projection.warmup_steps=1"],
        "grpo",
    ),
    ("core", ["reward=core"], "grpo"),
    ("rubric_judge", ["reward=rubric"], "grpo"),
    ("grpo (AIR data, 16/step)", AIR_BASE, None),
    ("air", [*AIR_BASE[:2], "algorithm/regularizers=[air]"], "grpo (AIR data, 16/step)"),
]
COLUMNS = [("step_s", "s/step", "{:.2f}"), ("cpu_s", "CPU s/step", "{:.2f}"), ("gen_tok_s", "gen tok/s", "{:.1f}"),
           ("score_ms", "score ms", "{:.0f}"), ("loss_ms", "loss ms", "{:.1f}"), ("grad_ms", "grad ms", "{:.0f}"), ("train_tok_s", "train tok/s", "{:.1f}"),
           ("train_gflop_s", "train GFLOP/s", "{:.1f}"), ("decode_gb_s", "decode GB/s", "{:.1f}"),
           ("peak_rss_mb", "peak RSS MB", "{:.0f}")]  # fmt: skip

SMALLEST = "smallest: G={args.num_generations}, {args.max_completion_length} tokens, SmolLM2-135M, 1 process"
OWN = ("score_ms", "loss_ms", "grad_ms")  # where rlpost's components run: rewards/advantages, loss, grad transform


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--suites", default="trl,components,scaling", help="comma list of trl, components, scaling, env, matmul"
    )
    p.add_argument("--model", default="smollm2-135m", choices=["smollm2-135m", "tiny-random"])
    p.add_argument("--steps", type=int, default=7, help="optimizer steps per run")
    p.add_argument("--warmup", type=int, default=3, help="first steps excluded (allocator and cache warm-up)")
    p.add_argument("--system-malloc", action="store_true", help="glibc's default malloc settings (see KEEP_MEMORY)")
    p.add_argument("--reps", type=int, default=3, help="repetitions of the trl suite's variants")
    p.add_argument("--component-reps", type=int, default=1, help="repetitions in the components and scaling suites")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--completions-per-step", type=int, default=8)
    p.add_argument("--max-completion-length", type=int, default=32)
    p.add_argument(
        "--trl-variants", default=",".join(TRL_VARIANTS), help=f"plain-TRL configurations: {', '.join(TRL_VARIANTS)}"
    )
    p.add_argument(
        "--long-shapes",
        default=",".join(f"{n}x{c}" for n, c in LONG_SHAPES),
        help="the long suite's shapes, max new tokens x completions per step (e.g. 256x8)",
    )
    p.add_argument("--algorithm", default="grpo", choices=list(TRL_EQUIVALENT), help="the trl suite's algorithm")
    p.add_argument("--threads", type=int, default=0, help="torch threads in each run (0: torch's default)")
    p.add_argument("--hardware", default="cpu", choices=["cpu", "gpu"], help="hardware profile of every run")
    p.add_argument("--set", action="append", default=[], help="an override of every run (e.g. model.tiny_layers=30)")
    p.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"), help="markdown file to append to")
    p.add_argument("--no-write", action="store_true", help="print the tables only")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    args.trl_variants = [s.strip() for s in args.trl_variants.split(",") if s.strip()]
    args.long_shapes = [tuple(int(x) for x in s.split("x")) for s in args.long_shapes.split(",") if s.strip()]
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown or args.steps <= args.warmup:
        p.error(
            f"unknown suite {unknown[0]!r}; choose from {', '.join(SUITES)}"
            if unknown
            else "--steps must exceed --warmup"
        )
    return args


def batch(args, g: int | None = None, length: int | None = None, per_step: int | None = None) -> list[str]:
    return [f"train.num_generations={g or args.num_generations}",
            f"train.completions_per_step={per_step or args.completions_per_step}",
            f"train.max_completion_length={length or args.max_completion_length}"]  # fmt: skip


# ---- suites: lists of variants -----------------------------------------------------------------
def trl_suite(args, length: int | None = None, per_step: int | None = None, template: list[str] = ()) -> list[dict]:
    """Plain TRL in each configuration that keeps its results (``TRL_VARIANTS``), rlpost doing TRL's
    computation (compared with plain TRL) and rlpost's defaults (compared with the fastest TRL variant)."""
    extra, trl = TRL_EQUIVALENT[args.algorithm]
    overrides = [f"algorithm={args.algorithm}", *batch(args, length=length, per_step=per_step), *extra, *template]
    return [
        *({"label": label, "trainer": "TRL", "overrides": overrides, "trl": {**trl, **settings},
           "base": None if label == "TRL" else "TRL"}
          for label, settings in TRL_VARIANTS.items() if label in args.trl_variants),
        {"label": "rlpost, TRL's computation", "trainer": "rlpost", "overrides": [*overrides, *SAME_AS_TRL],
         "base": "TRL"},
        {"label": "rlpost (defaults: fast)", "trainer": "rlpost", "overrides": overrides, "base": FASTEST_TRL},
    ]  # fmt: skip


def long_suite(args) -> list[dict]:
    """The trl suite at reasoning lengths: 8 completions of up to 256 tokens and 4 of up to 1024, on a
    prompt that asks for the working (``STEP_BY_STEP``), so the completions do get long."""
    variants = []
    for length, per_step in args.long_shapes:
        for v in trl_suite(args, length=length, per_step=per_step, template=STEP_BY_STEP):
            tag = f"{per_step} x {length}: "
            base = v.get("base")
            variants.append({**v, "label": tag + v["label"], "group": tag,
                             **({"base": base if base == FASTEST_TRL else tag + base} if base else {})})  # fmt: skip
    return variants


def components_suite(args) -> list[dict]:
    def shape(o):  # AIR packs whole intents (up to 4 variants x G) into a generation batch
        return batch(args, per_step=16) if o[:1] == AIR_BASE[:1] else batch(args)

    return [{"label": label, "trainer": "rlpost", "overrides": [*shape(o), *o], "base": base}
            for label, o, base in COMPONENTS]  # fmt: skip


def scaling_suite(args) -> list[dict]:
    """rlpost's step along one dimension at a time, each row against the smallest setting (``SMALLEST``):
    group size G (2 prompts per step), completion length, model size (SmolLM2-135M, Qwen2.5-Coder-0.5B:
    ``make qwen``) and process count (1 vs 2 processes of one thread each under ``accelerate launch``;
    both of those rows run the CLI and read its logged ``step_time``, so the launcher's cost is in both)."""
    g, n, smallest = args.num_generations, args.max_completion_length, SMALLEST.format(args=args)
    variants = [{"label": smallest, "trainer": "rlpost", "overrides": batch(args)}]
    variants += [{"label": f"group size: G={k}", "trainer": "rlpost", "overrides": batch(args, k, None, 2 * k),
                  "base": smallest} for k in (2 * g, 4 * g)]  # fmt: skip
    variants += [{"label": f"completion length: {k} tokens", "trainer": "rlpost", "overrides": batch(args, length=k),
                  "base": smallest} for k in (2 * n, 4 * n, 8 * n)]  # fmt: skip
    variants.append({"label": "model size: Qwen2.5-Coder-0.5B", "trainer": "rlpost", "overrides": batch(args),
                     "model": "qwen2.5-coder-0.5b", "base": smallest})  # fmt: skip
    variants += [{"label": f"processes: {k} (CLI, {2 // k} thread{'s' if k == 1 else ''} each)", "trainer": "cli",
                  "overrides": [*batch(args), f"hardware.num_processes={k}"],
                  "base": "processes: 1 (CLI, 2 threads each)" if k > 1 else None} for k in (1, 2)]  # fmt: skip
    return variants


def env_suite(args) -> list[dict]:
    """A single-turn step against calculator episodes of one turn (SmolLM2 rarely calls the tool by itself)
    and of exactly two (bench/env_bench.py: the first turn answered with the tool's result)."""
    env = ["data.template='{question}'"]
    return [
        {"label": "single turn (no environment)", "trainer": "rlpost", "overrides": batch(args)},
        {"label": "calculator episode, 1 turn", "trainer": "rlpost", "base": "single turn (no environment)",
         "overrides": [*batch(args), *env, "data/env=calculator", "reward=env"]},
        {"label": "calculator episode, 2 turns", "trainer": "rlpost", "base": "single turn (no environment)",
         "overrides": [*batch(args), *env, "data/env=callable", "data.env.path=env_bench:TwoTurnCalculator",
                       "reward=env", "data.env.max_turns=2"]},
    ]  # fmt: skip


def matmul_suite(args) -> list[dict]:
    """``train.cpu_matmul``: does ``auto`` (a timing at the first run, rlpost/generation/matmul_choice.py) land on the
    faster of the two kernels on this machine?"""
    base = "train.cpu_matmul=aten"
    return [{"label": f"train.cpu_matmul={choice}", "trainer": "rlpost", "base": base,
             "overrides": [*batch(args), f"train.cpu_matmul={choice}"]} for choice in ("aten", "onednn", "auto")]  # fmt: skip


SUITES = {
    "trl": trl_suite,
    "components": components_suite,
    "scaling": scaling_suite,
    "env": env_suite,
    "matmul": matmul_suite,
    "long": long_suite,
}


# ---- tables --------------------------------------------------------------------------------------
def cell(fmt: str, value: float) -> str:
    return "-" if math.isnan(value) else fmt.format(value)


def table(variants: list[dict], runs: dict, peak: float, bandwidth: float, reference: str | None) -> str:
    """One row per variant: medians over repetitions; ``% peak``: the training phase's model FLOP/s over
    the fp32 matmul peak; ``% BW``: decode's bytes read per second over the measured copy bandwidth."""
    head = "| variant | " + " | ".join(t for _, t, _ in COLUMNS) + " | % peak | % BW | s/step per rep | ratio |"
    lines = [head, "|---" * (len(COLUMNS) + 5) + "|"]
    med = {}
    for v in variants:
        rows = runs[v["label"]]
        med[v["label"]] = {k: statistics.median(r[k] for r in rows) for k, _, _ in COLUMNS}
    for v in variants:
        m, base = med[v["label"]], v.get("base", reference)
        if base == FASTEST_TRL or (base and base not in med):  # the fastest plain-TRL run of the same shape
            trl = [u["label"] for u in variants if u["trainer"] == "TRL" and u.get("group") == v.get("group")]
            base = min(trl, key=lambda label: med[label]["step_s"])
        cells = [cell(fmt, m[k]) for k, _, fmt in COLUMNS]
        per_rep = ", ".join(f"{r['step_s']:.2f}" for r in runs[v["label"]])
        ratio = ""
        if base and base != v["label"]:  # wall ratio, and the ratio from the extra time in rlpost's own code
            ratio = f"{m['step_s'] / med[base]['step_s']:.3f}x vs {base}"
            extra = sum(m[k] - med[base][k] for k in OWN) / 1e3
            if not math.isnan(extra):
                ratio += f"; own code {extra:+.2f} s = {1 + extra / med[base]['step_s']:.3f}x"
        lines.append(
            f"| {v['label']} | " + " | ".join(cells) + f" | {cell('{:.0f}%', 100 * m['train_gflop_s'] / peak)} | "
            f"{cell('{:.0f}%', 100 * m['decode_gb_s'] / bandwidth)} | {per_rep} | {ratio} |"
        )
    return "\n".join(lines)


def child_main(args) -> int:
    variant = json.loads(args.child)
    run = cli_run if variant["trainer"] == "cli" else measured_run
    result = run(variant, variant.get("model", args.model), args.steps, args.threads, args.hardware, tuple(args.set))
    Path(args.child_out).write_text(json.dumps(result))
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}
    env.update({} if args.system_malloc else KEEP_MEMORY)
    common = [f"--model={args.model}", f"--steps={args.steps}", f"--warmup={args.warmup}", f"--threads={args.threads}",
              f"--hardware={args.hardware}", *(f"--set={o}" for o in args.set)]  # fmt: skip
    suites = {name: SUITES[name](args) for name in args.suites}
    plan = []
    for name, variants in suites.items():
        reps = args.reps if name == "trl" else args.component_reps  # the long suite: one rep is minutes
        for rep in range(reps):
            rotated = variants[rep % len(variants) :] + variants[: rep % len(variants)]
            plan += [(name, rep, v) for v in rotated]
    device = "cuda" if args.hardware == "gpu" else "cpu"
    load, rates = os.getloadavg()[0], matmul_peak_gflops(args.threads, device=device)
    peak = max(rates.values())  # the machine's: the faster kernel
    bandwidth = memory_bandwidth_gbs(args.threads) if device == "cpu" else float("nan")
    runs, hashes, rewards, threads = defaultdict(list), defaultdict(set), {}, 0
    with tempfile.TemporaryDirectory() as tmp, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    ) as progress:  # fmt: skip
        task = progress.add_task("runs", total=len(plan))
        for i, (suite, rep, variant) in enumerate(plan):
            progress.update(task, description=f"{suite} rep {rep + 1}: {variant['label'][:28]:28}")
            out, log = Path(tmp) / f"{i}.json", Path(tmp) / f"{i}.log"
            cmd = [sys.executable, __file__, *common, f"--child={json.dumps(variant)}", f"--child-out={out}"]
            with open(log, "w") as fh:
                code = subprocess.call(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
            if code:
                progress.stop()
                sys.stderr.write(log.read_text()[-4000:])
                print(f"run {variant['label']} (rep {rep + 1}) failed with exit code {code}", file=sys.stderr)
                return 1
            result = json.loads(out.read_text())
            runs[suite, variant["label"]].append(summarize_run(result, args.warmup))
            if not result.get("cli"):  # a CLI run logs its step time only
                hashes[suite, rep, variant.get("group")].add(result["completions_hash"])
                rewards[variant["label"]] = result["rewards"]
                threads = result["torch_threads"]
            progress.advance(task)
    report = [
        f"## {' '.join([args.model, *args.set])}: {', '.join(args.suites)} ({args.steps} steps per run, first {args.warmup} excluded; "
        f"G={args.num_generations}, {args.completions_per_step} completions/step, {args.max_completion_length} new tokens "
        f"unless stated; {'bf16 GPU' if device == 'cuda' else 'fp32 CPU'}; {'system malloc' if args.system_malloc else 'malloc keeps freed memory (KEEP_MEMORY)'})"
        f"\n\n{machine(threads, load)}; matmul peak {peak:.0f} GFLOP/s ({'bf16 8192^3' if device == 'cuda' else 'fp32 2048^2, best of 8'}; "
        + ", ".join(f"{name} {rate:.0f}" for name, rate in rates.items())
        + f"); memory bandwidth {bandwidth:.1f} GB/s (STREAM-like copy of 256 MiB, best of 10)\n"
    ]
    for name, variants in suites.items():
        by_label = {v["label"]: runs[name, v["label"]] for v in variants}
        report.append(f"### {name}\n\n{table(variants, by_label, peak, bandwidth, variants[0]['label'])}\n")
        if name in ("trl", "long"):
            same = all(len(h) == 1 for (suite, *_), h in hashes.items() if suite == name)
            report.append(f"Same completions in every variant of a repetition: {'yes' if same else 'NO'}. "
                          "Rewards per step: " + "; ".join(f"{v['label']}: {rewards[v['label']]}" for v in variants) + "\n")  # fmt: skip
    text = "\n".join(report)
    print(text)
    if not args.no_write:
        with open(args.out, "a") as fh:
            fh.write("\n" + text)
        print(f"appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
