"""Soak benchmark: does a long ``rlpost train`` run leak memory, file descriptors or threads? (bench/, not CI)

    .venv/bin/python bench/soak.py --tiny-steps 300 --smol-steps 60

Two real training runs, each ``rlpost train`` in a fresh subprocess with glibc's KEEP_MEMORY settings
(Makefile, ``make train``), through the CLI as a user runs it (``rlpost.cli.main``: Hydra, validation,
rlpost.train.train, final eval, final checkpoint, plots, summary):

- ``tiny``: the tiny random Llama (model=tiny-random, the fast settings of tests/support/trainer.py TINY)
  with periodic eval (``eval.every``), checkpoints (``train.save_steps`` + ``save_total_limit``),
  the rollout replay (``logging.replay=true``) and tensorboard on, so a leak in any of those paths shows;
- ``smol``: SmolLM2-135M-Instruct (the default model and task) with periodic eval and checkpoints.

The child process gets one extra trainer callback (added to the trainer that rlpost.train builds; no
rlpost code is changed) that, after every optimizer step, appends to ``<out>/<run>.jsonl``: wall and CPU
time, RSS, its anonymous part (RssAnon) and its high-water mark (/proc/self/status), glibc's own count of
memory in use and held free (mallinfo2), open file descriptors (/proc/self/fd), Python threads
(``threading.active_count()``) and OS threads (/proc/self/task); every ``--every`` steps also the fd
targets, thread names and the number of objects the garbage collector tracks. A last row is taken after
``rlpost train`` returns (final eval, final checkpoint and plots done).

Printed: a line every ``--every`` steps while it runs, then per run a table (step, s/step over the last
``--every`` steps, RSS and anonymous RSS in MiB, fds, threads) and one verdict line: RSS at the end of
warm-up (``--warmup``, step 20) and at the last step, their difference, the least-squares slope in MiB
per 100 steps and the highest value over the steps after warm-up, and the fd and thread deltas over the
same steps. Memory counts as flat when neither the last-step difference nor the fitted line's rise over
those steps exceeds max(32 MiB, 2% of the warm-up RSS), for RSS and for anonymous RSS; any fd or thread
more than at warm-up is a leak too (exit code 1). With KEEP_MEMORY glibc keeps what is freed, so RSS
also grows when the heap fragments (malloc's "held free" grows while "in use" stays flat); the
file-backed part of RSS (libraries, weights) moves by some MiB either way as the kernel drops and faults
in pages. Step times include the periodic eval and checkpoint saves.

``<out>`` (default outputs/soak/<date>_<time>/, git-ignored) receives the records, each child's full log,
the run directories, machine.json, soak.md (the tables) and soak.png (RSS and step time against the step).
``--report <out>`` re-tabulates an earlier folder without training; ``--override key=value`` (repeatable)
adds an rlpost override to both runs (e.g. ``--override train.cpu_matmul=aten``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from soak_report import report

ROOT = Path(__file__).resolve().parent.parent
KEEP_MEMORY = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 36)}
COMMON = ["logging.progress=false", "hardware=cpu"]
RUNS = {  # name -> (label, overrides besides train.steps)
    "tiny": (
        "tiny-random",
        [
            "model=tiny-random",
            "train.max_completion_length=8",
            "train.learning_rate=1e-3",
            "data.train_size=64",
            "data.eval_size=8",
            "eval.size=8",
            "eval.every=25",
            "train.save_steps=50",
            "train.save_total_limit=2",
            "logging.replay=true",
        ],
    ),  # fmt: skip
    "smol": (
        "SmolLM2-135M",
        ["data.eval_size=20", "eval.size=20", "eval.every=20", "train.save_steps=30", "train.save_total_limit=2"],
    ),
}
PREFIX = "soak |"


# ---- the child: one `rlpost train` with a recording callback ------------------------------------
def status_mib() -> dict[str, float]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
    # RssAnon is the heap (where a leak shows); RssFile the mapped files (libraries, weights), which the
    # kernel may drop and fault in again, so RSS moves by some MiB without any allocation
    return {"rss_mib": out["VmRSS"], "hwm_mib": out["VmHWM"], "anon_mib": out["RssAnon"], "file_mib": out["RssFile"]}


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip


def malloc_mib() -> dict[str, float]:
    """glibc's own count (mallinfo2): bytes malloc has handed out and not yet freed (``malloc_used``)
    and bytes it holds free (``malloc_free``). RSS growing while ``malloc_used`` stays flat is the
    allocator keeping or fragmenting memory, not a leak of live objects."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):  # not glibc, or glibc < 2.33
        return {}
    mib = 1 / (1 << 20)
    return {"malloc_used_mib": (info.uordblks + info.hblkhd) * mib, "malloc_free_mib": info.fordblks * mib}


def fd_targets() -> list[str]:
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the fd of the listdir itself, closed by now
            pass
    return sorted(targets)


def sample(step: int | None, phase: str, detail: bool) -> dict:
    row = {
        "step": step,
        "phase": phase,
        "t": time.perf_counter(),
        "cpu": time.process_time(),
        **status_mib(),
        **malloc_mib(),
        "fds": len(os.listdir("/proc/self/fd")) - 1,  # minus the fd listdir holds while it reads
        "py_threads": threading.active_count(),
        "os_threads": len(os.listdir("/proc/self/task")),
    }
    if detail:
        row.update(
            fd_targets=fd_targets(),
            thread_names=sorted(t.name for t in threading.enumerate()),
            gc_objects=len(gc.get_objects()),
        )
    return row


def child(record: str, name: str, every: int, overrides: list[str]) -> int:
    from transformers import TrainerCallback

    import rlpost.train
    from rlpost.cli import main

    out = open(record, "a", buffering=1)  # noqa: SIM115 (open for the whole run)

    def write(row: dict) -> dict:
        out.write(json.dumps(row) + "\n")
        return row

    class Recorder(TrainerCallback):
        def __init__(self):
            self.last = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.last = write(sample(state.global_step, "train_begin", True))

        def on_step_end(self, args, state, control, **kwargs):
            step = state.global_step
            row = write(sample(step, "step", step % every == 0))
            if step % every == 0:
                window = [r for r in (self.last,) if r]
                s_step = (row["t"] - window[0]["t"]) / (step - window[0]["step"]) if window else float("nan")
                print(
                    f"{PREFIX} {name} | step {step:4d} | {s_step:6.2f} s/step | RSS {row['rss_mib']:7.1f} MiB "
                    f"| fds {row['fds']:3d} | threads {row['py_threads']}/{row['os_threads']}",
                    flush=True,
                )
                self.last = row

        def on_train_end(self, args, state, control, **kwargs):
            write(sample(state.global_step, "train_end", True))

    make_trainer = getattr(rlpost.train, "trainer_class", None)  # the one place rlpost.train builds its trainer
    if make_trainer is None:
        sys.exit("soak: rlpost.train no longer builds its trainer through trainer_class(run); update bench/soak.py")

    def trainer_class(run):
        cls = make_trainer(run)

        def build(*args, **kwargs):
            trainer = cls(*args, **kwargs)
            trainer.add_callback(Recorder())  # last in the list: runs after eval.every's evaluation
            return trainer

        return build

    rlpost.train.trainer_class = trainer_class
    code = 1
    try:
        code = main(["train", *overrides])
    finally:
        gc.collect()
        write({**sample(None, "exit", True), "code": code})
        out.close()
    return code


# ---- the parent: run, tabulate, judge, plot --------------------------------------------------
def run_one(name: str, steps: int, args, out: Path) -> None:
    label, overrides = RUNS[name]
    record, log = out / f"{name}.jsonl", out / f"{name}.log"
    overrides = [f"train.steps={steps}", *COMMON, *overrides, *args.override, f"hydra.run.dir={out / name}"]
    env = {**os.environ, **({} if args.system_malloc else KEEP_MEMORY)}
    cmd = [
        sys.executable,
        __file__,
        "--child",
        str(record),
        "--name",
        name,
        "--every",
        str(args.every),
        "--",
        *overrides,
    ]
    print(f"\n== {label}: {steps} steps: rlpost train {' '.join(overrides)}", flush=True)
    started = time.perf_counter()
    with open(log, "w") as log_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            log_file.write(line)
            if line.startswith(PREFIX) or args.verbose:
                print(line, end="", flush=True)
        code = proc.wait()
    print(f"   {label}: exit code {code}, {time.perf_counter() - started:.0f} s wall (log: {log})", flush=True)
    if code != 0:
        sys.exit(f"soak: the {label} run failed (exit code {code}); see {log}")
    if not record.exists() or '"train_begin"' not in record.read_text():
        sys.exit(f"soak: the {label} run recorded nothing (the callback was not attached); see {log}")


def machine(system_malloc: bool) -> dict:
    import torch

    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        cpu = "unknown CPU"
    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "torch": f"{torch.__version__} ({torch.get_num_threads()} threads)",
        "malloc": "system malloc" if system_malloc else "KEEP_MEMORY (glibc keeps freed memory, as `make train`)",
        "date": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "load_start": os.getloadavg()[0],
    }


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny-steps", type=int, default=300, help="steps of the tiny random model (0: skip)")
    p.add_argument("--smol-steps", type=int, default=60, help="steps of SmolLM2-135M (0: skip)")
    p.add_argument("--every", type=int, default=10, help="print and tabulate every N steps")
    p.add_argument("--warmup", type=int, default=20, help="RSS, fds and threads are compared from this step on")
    p.add_argument("--out", help="folder for records, logs, run dirs, soak.png (default outputs/soak/<date>_<time>)")
    p.add_argument("--report", metavar="OUT", help="only tabulate and plot the records of an earlier --out folder")
    p.add_argument("--override", action="append", default=[], help="an extra rlpost override for both runs (repeat)")
    p.add_argument("--system-malloc", action="store_true", help="glibc's default malloc instead of KEEP_MEMORY")
    p.add_argument("--verbose", action="store_true", help="echo the children's whole output")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--name", help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args.child, args.name, args.every, args.overrides)
    labels = {name: label for name, (label, _) in RUNS.items()}
    if args.report:
        return report(Path(args.report).resolve(), labels, args.warmup, args.every)
    out = Path(args.out or ROOT / "outputs" / "soak" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started, m = time.perf_counter(), machine(args.system_malloc)
    for name, steps in (("tiny", args.tiny_steps), ("smol", args.smol_steps)):
        (out / f"{name}.jsonl").unlink(missing_ok=True)  # a reused --out folder: only this invocation's runs
        if steps > 0:
            run_one(name, steps, args, out)
    m.update(load_end=os.getloadavg()[0], minutes=(time.perf_counter() - started) / 60)
    (out / "machine.json").write_text(json.dumps(m, indent=2) + "\n")
    return report(out, labels, args.warmup, args.every)


if __name__ == "__main__":
    sys.exit(main())
