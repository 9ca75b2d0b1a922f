"""Run the real ``rlpost`` CLI in subprocesses on the tiny random model (tests of killed, preempted
and failing runs, multi-process runs, recipes run for one step)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from support.paths import REPO  # the checkout whose rlpost and tests/ the subprocesses import
from support.trainer import HASH_REWARD, TINY

ARGS = [
    "model=tiny-random",
    "train.max_completion_length=8",
    "train.learning_rate=1e-3",
    "data.train_size=32",
    "data.eval_size=8",
    "eval.size=8",
    "eval.at_start=false",
    "eval.at_end=false",
    "logging.tensorboard=false",
    "logging.progress=false",
    "logging.plots=false",
    "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]",
]
NOT_COMPARED = ("step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second")


def launch(cwd: Path, *args: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "rlpost.cli", "train", *ARGS, *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: int = 600) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def run_dirs(cwd: Path) -> list[Path]:
    return sorted(p.parent for p in (cwd / "outputs").glob("*/*/config.yaml"))


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"run ended before the condition held:\n{proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out")
        time.sleep(0.05)


def metrics(run_dir: Path) -> list[dict]:
    """The per-step training logs of metrics.jsonl (not the end-of-training summary row)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [row for row in rows if "grad_norm" in row]


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlpost.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"rlpost {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def one_step(recipe: str, tmp_path: Path, *extra: str) -> list[dict]:
    """`rlpost train recipe=<recipe>` for 1 step on the tiny model -> the metrics.jsonl rows."""
    run_dir = tmp_path / recipe
    run_cli(["train", f"recipe={recipe}", *TINY_CLI, *extra, f"hydra.run.dir={run_dir}"], tmp_path)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows, "no metrics written"
    return rows


TINY_CLI = [
    "model=tiny-random",
    "train.steps=1",
    "train.num_generations=2",
    "train.completions_per_step=4",
    "train.max_completion_length=8",
    "eval.at_start=false",
    "eval.size=4",
    "logging.tensorboard=false",
    "logging.progress=false",
    "logging.plots=false",
]


QUICK = [
    *[o for o in TINY if not o.startswith("train.steps")],
    HASH_REWARD,
    "train.steps=2",
    "train.learning_rate=1e-2",
    "eval.at_start=false",
    "eval.at_end=false",
    "logging.plots=false",
]


def rlpost(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("RLPOST_LAUNCHED", None)
    return subprocess.run(
        [sys.executable, "-m", "rlpost.cli", "train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
