"""Run the real ``rlpost train`` CLI in subprocesses on the tiny random model (tests of killed,
preempted and failing runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
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
    "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support_rewards:text_hash_reward'}}]",
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
