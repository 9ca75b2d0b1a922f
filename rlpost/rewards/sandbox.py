"""Run one candidate program against its tests in a child process with time and memory limits.

The parent side of ``code_exec`` (the child is ``code_runner.py``). Each call gets a fresh temporary
directory as the child's working directory (removed afterwards); the child is ``python -I`` (no user
site, no PYTHON* variables) with a minimal environment, in its own session so a timeout kills its
whole process group. Limits, set by the child itself (``code_runner.py``, ``resource.setrlimit``) before
it reads the program (not with ``preexec_fn``, which can deadlock when the parent has threads, as the
trainer and the reward's worker threads do):
``RLIMIT_AS`` = ``memory_mb`` (a memory hog gets ``MemoryError`` or dies), ``RLIMIT_CPU`` = int(time
limit) + 2 s (a busy loop gets SIGXCPU even if the wall clock timer failed),
``RLIMIT_FSIZE`` = 16 MiB (no disk filling), ``RLIMIT_CORE`` = 0. The wall-clock limit is
``timeout_s``. This is isolation against accidents (loops, hogs, crashes), not a security boundary:
the child runs as the training user and could, say, write its own ``result.json``. When Debian's ``bwrap`` (bubblewrap) is on PATH and
``sandbox: auto``/``bwrap``, the child additionally runs with a read-only root, its own temp dir
writable, and no network (``--unshare-all``); bwrap is not installed on the machines rlpost was
developed on, so that path is not covered by the tests there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "code_runner.py")
STATUSES = ("ok", "syntax_error", "crash", "memory", "timeout", "no_entry_point", "no_code")


@dataclass(frozen=True)
class Outcome:
    """What one execution gave: ``passed`` of ``total`` test statements and a status in ``STATUSES``."""

    status: str
    passed: int = 0
    total: int = 0


def use_bwrap(sandbox: str) -> bool:
    if sandbox == "none":
        return False
    found = shutil.which("bwrap") is not None
    if sandbox == "bwrap" and not found:
        raise RuntimeError("code_exec sandbox=bwrap but bwrap (Debian package bubblewrap) is not on PATH")
    return found


def execute(
    program: str, tests: str, entry_point: str | None, timeout_s: float, memory_mb: int, sandbox: str = "auto"
) -> Outcome:
    """Run ``program`` then ``tests`` in a limited child; any failure is an ``Outcome``, never an exception."""
    with tempfile.TemporaryDirectory(prefix="rlpost_exec_") as folder:
        for name, text in (("program.py", program), ("tests.py", tests)):
            with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        with open(os.path.join(folder, "spec.json"), "w", encoding="utf-8") as handle:
            json.dump({"entry_point": entry_point, "memory_mb": memory_mb, "cpu_s": int(timeout_s) + 2}, handle)
        command = [sys.executable, "-I", RUNNER, folder]
        if use_bwrap(sandbox):
            command = [
                "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", folder, folder,
                "--unshare-all", "--die-with-parent", "--chdir", folder, *command,
            ]  # fmt: skip
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        try:
            proc = subprocess.Popen(
                command,
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError:
            return Outcome("crash")
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return Outcome("timeout")
        path = os.path.join(folder, "result.json")
        if not os.path.exists(path):  # killed by a signal (SIGXCPU, SIGKILL on memory) or interpreter crash
            if proc.returncode == -signal.SIGXCPU:
                return Outcome("timeout")
            return Outcome("memory" if b"MemoryError" in (stderr or b"") else "crash")
        try:
            with open(path, encoding="utf-8") as handle:
                result = json.load(handle)
            return Outcome(str(result["status"]), int(result["passed"]), int(result["total"]))
        except (ValueError, KeyError, TypeError):
            return Outcome("crash")


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
