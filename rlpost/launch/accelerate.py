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

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rlpost.launch.deepspeed import write_deepspeed_config

MARKER = "RLPOST_LAUNCHED"  # set in the children: they run the job instead of launching again


def should_relaunch(hardware: Any) -> bool:
    return hardware.num_processes > 1 and not os.environ.get(MARKER) and "LOCAL_RANK" not in os.environ


def single_process_env(hardware: Any) -> None:
    """One process with DeepSpeed (ZeRO on one GPU): the rendezvous variables a launcher would set,
    so DeepSpeed's init_distributed finds a world of 1 instead of searching for MPI."""
    if hardware.zero_stage and hardware.num_processes == 1 and "WORLD_SIZE" not in os.environ:
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
            os.environ.setdefault(key, value)
        os.environ.setdefault("MASTER_PORT", str(hardware.main_process_port))


def default_run_dir() -> str:
    """Hydra's default run directory (conf/config.yaml hydra.run.dir), fixed once for every process."""
    return time.strftime("outputs/%Y-%m-%d/%H-%M-%S")


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
    run_dir = given.get("hydra.run.dir")
    if run_dir is None:
        run_dir = default_run_dir()
        overrides = [*overrides, f"hydra.run.dir={run_dir}"]
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_deepspeed_config(hardware, run_dir)
    cmd = launch_command(hardware, overrides)
    from rlpost.secrets import redact_override

    shown = cmd[: len(cmd) - len(overrides)] + [redact_override(o) for o in overrides]  # no secret in a file
    line = f"{MARKER}=1 " + shlex.join(shown)
    (Path(run_dir) / "launch.sh").write_text(
        f"#!/bin/sh\n# written by rlpost train (hardware={hardware.name})\n{line}\n"
    )
    print(f"rlpost: launching {hardware.num_processes} processes: {line}", file=sys.stderr, flush=True)
    return subprocess.call(cmd, env={**os.environ, MARKER: "1"})
