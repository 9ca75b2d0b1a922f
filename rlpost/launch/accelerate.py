"""``hardware.num_processes > 1``: ``rlpost train`` re-runs itself under ``accelerate launch``.

The parent process validates the config, fixes one run directory for all processes
(``hydra.run.dir``), writes ``<run>/deepspeed.json`` (ZeRO) and ``<run>/launch.sh`` (the exact
command, re-runnable), prints the command, and runs
``python -m accelerate.commands.launch --multi_gpu --num_processes N [multi-node flags] -m rlpost.cli
train <same overrides>``. The children carry ``RLPOST_LAUNCHED=1`` and never re-launch; a process
already started by torchrun / accelerate (``LOCAL_RANK`` set) is not re-launched either.

Choices the brief leaves open: accelerate's torchrun launcher (``--multi_gpu``) is used on CPU and
GPU alike (its ``--cpu`` launcher starts one process unless MPI is set up); on CPU the processes
then use gloo. DeepSpeed is switched on inside the processes by transformers from the ``deepspeed=``
training argument (the same ``deepspeed.json``), not by accelerate's DeepSpeed launcher, so one
code path serves single-node, multi-node, CPU and GPU runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rlpost.core.errors import EXIT_PREEMPTED
from rlpost.launch.deepspeed import write_deepspeed_config

MARKER = "RLPOST_LAUNCHED"  # set in the children: they run the job instead of launching again
AGENT_SIGNALS = "TORCHELASTIC_SIGNALS_TO_HANDLE"  # what torchrun's agent turns into killing its workers
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def should_relaunch(hardware: Any) -> bool:
    return hardware.num_processes > 1 and not os.environ.get(MARKER) and "LOCAL_RANK" not in os.environ


def single_process_env(hardware: Any) -> None:
    """One process with DeepSpeed (ZeRO on one GPU): the rendezvous variables a launcher would set,
    so DeepSpeed's init_distributed finds a world of 1 instead of searching for MPI."""
    if hardware.zero_stage and hardware.num_processes == 1 and "WORLD_SIZE" not in os.environ:
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
            os.environ.setdefault(key, value)
        os.environ.setdefault("MASTER_PORT", str(hardware.main_process_port))


def launch_command(hardware: Any, overrides: list[str]) -> list[str]:
    """The accelerate launch command line that runs ``rlpost train <overrides>`` on N processes."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    cmd += ["--num_processes", str(hardware.num_processes), "--num_machines", str(hardware.num_machines)]
    if hardware.num_machines > 1:
        cmd += ["--machine_rank", str(hardware.machine_rank), "--main_process_ip", str(hardware.main_process_ip)]
    cmd += ["--main_process_port", str(hardware.main_process_port)]
    if hardware.device == "cpu":
        cmd += ["--num_cpu_threads_per_process", "1"]
    return [*cmd, "-m", "rlpost.cli", "train", *overrides]


def relaunch(hardware: Any, overrides: list[str]) -> int:
    """Write deepspeed.json and launch.sh into the run directory, print the command, run it; its exit code."""
    given = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "=" in o}
    run_dir = given["hydra.run.dir"]  # claimed by the launch (rlpost/runs/claim.py), the same for every process
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_deepspeed_config(hardware, run_dir)
    cmd = launch_command(hardware, overrides)
    from rlpost.core.secrets import redact_override

    shown = cmd[: len(cmd) - len(overrides)] + [redact_override(o) for o in overrides]  # no secret in a file
    line = f"{MARKER}=1 " + shlex.join(shown)
    (Path(run_dir) / "launch.sh").write_text(
        f"#!/bin/sh\n# written by rlpost train (hardware={hardware.name})\n{line}\n"
    )
    print(f"rlpost: launching {hardware.num_processes} processes: {line}", file=sys.stderr, flush=True)
    started = time.time()
    code = run_forwarding_signals(cmd, {**os.environ, MARKER: "1", AGENT_SIGNALS: "SIGHUP,SIGQUIT"})
    return EXIT_PREEMPTED if code != 0 and preempted_since(run_dir, started) else code


def run_forwarding_signals(cmd: list[str], env: dict[str, str]) -> int:
    """Run the launcher in a process group of its own; SIGTERM/SIGINT sent to this process go to
    every process of that group (the launcher and the training processes).

    The launcher ignores both signals (inherited SIG_IGN, and ``TORCHELASTIC_SIGNALS_TO_HANDLE``
    leaves them out), so it neither dies nor kills the training processes after its 30 s grace:
    each training process finishes its step, saves one checkpoint with the others and exits
    (rlpost/runs/preemption.py; rlpost/cli.py restores the default handlers until training starts).
    """
    child = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_ignore_stop_signals)

    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ignore_stop_signals() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def restore_stop_signals() -> None:
    """In a launched training process: SIGTERM/SIGINT stop it again (its launcher made them ignored)
    until the trainer installs its save-and-stop handler (rlpost/runs/preemption.py)."""
    if os.environ.get(MARKER):
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL if sig == signal.SIGTERM else signal.default_int_handler)


def preempted_since(run_dir: str | Path, started: float) -> bool:
    """The training processes of this launch saved a checkpoint and stopped on a signal (summary.json)."""
    summary = Path(run_dir) / "summary.json"
    try:
        return summary.stat().st_mtime >= started and bool(json.loads(summary.read_text()).get("preempted"))
    except (OSError, ValueError):
        return False
