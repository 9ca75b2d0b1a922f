"""Run one candidate program against its tests: a judge process holds the tests, the program runs in a jail.

The parent side of ``code_exec``. Two processes per call (both ``python -I`` with a minimal environment):
- the judge (``code_judge.py``, trusted: dataset tests only) gets the tests and limits in a folder of its
  own, starts the candidate, runs every test statement itself with the program's functions as proxies,
  and writes the verdict to the parent on its stdout;
- the candidate (``code_runner.py``) loads the model-written program in a fresh scratch folder and answers
  calls with Python literals. It never sees the tests and has no channel to the parent, so it cannot write
  or forge a verdict (the old ``result.json`` in its own folder is gone).

Limits, set by the candidate itself before it reads the program (``resource.setrlimit``, not
``preexec_fn``, which can deadlock when the parent has threads): address space ``memory_mb``, CPU seconds
int(time limit) + 2, 16 MiB files, no core dumps, 64 processes (for a non-root user). The wall-clock limit
``timeout_s`` is the judge's (and the parent's, with a margin); every process of a call is killed with its
process group.

The jail: with bubblewrap (``bwrap``, installed by ``make setup`` where it can) and ``sandbox: auto`` or
``bwrap``, the candidate runs with a read-only root, a private empty ``/tmp`` (the judge's folder is not
visible), only its scratch folder writable, and no network, no IPC and its own pid namespace
(``--unshare-all``; ``--die-with-parent``). Without bwrap (``sandbox: none``, or ``auto`` on a machine
without it) the rlimits still hold but the program runs as the training user: it can read files (the
tests included), write where that user can, and reach the network. ``sandbox_available()`` tells callers.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "code_runner.py")
JUDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "code_judge.py")
STATUSES = ("ok", "syntax_error", "crash", "memory", "timeout", "no_entry_point", "no_code")


@dataclass(frozen=True)
class Outcome:
    """What one execution gave: ``passed`` of ``total`` test statements and a status in ``STATUSES``."""

    status: str
    passed: int = 0
    total: int = 0
    detail: str | None = None  # why it did not run cleanly (a syntax error, a crash, the timeout)
    first_failure: str | None = None  # the first failing test statement and its error


def use_bwrap(sandbox: str) -> bool:
    """Whether to jail: ``auto`` when bubblewrap works here (installed is not enough: a container may forbid
    its namespaces), ``bwrap`` requires it, ``none`` never."""
    if sandbox == "none":
        return False
    works = sandbox_available()
    if sandbox == "bwrap" and not works:
        raise RuntimeError(
            "code_exec sandbox=bwrap but bubblewrap (Debian package bubblewrap) is missing or cannot run here"
        )
    return works


@functools.cache
def sandbox_available() -> bool:
    """Whether the jail (bubblewrap) is installed and works here (probed once per process)."""
    if shutil.which("bwrap") is None:
        return False
    probe = [
        "bwrap",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-all",
        "--die-with-parent",
        "true",
    ]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def jail(folder: str, command: list[str]) -> list[str]:
    """``command`` in bubblewrap: read-only root, a private /tmp with only ``folder`` in it writable, no network."""
    return [
        "bwrap", "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--bind", folder, folder, "--dev", "/dev",
        "--proc", "/proc", "--unshare-all", "--die-with-parent", "--chdir", folder, *command,
    ]  # fmt: skip


def execute(
    program: str, tests: str, entry_point: str | None, timeout_s: float, memory_mb: int, sandbox: str = "auto"
) -> Outcome:
    """Run ``program`` against ``tests`` (judge + jailed candidate); any failure is an ``Outcome``, never an exception."""
    with tempfile.TemporaryDirectory(prefix="rlpost_judge_") as judged, tempfile.TemporaryDirectory(
        prefix="rlpost_exec_"
    ) as folder:  # fmt: skip
        with open(os.path.join(folder, "program.py"), "w", encoding="utf-8") as handle:
            handle.write(program)
        with open(os.path.join(folder, "spec.json"), "w", encoding="utf-8") as handle:
            json.dump({"memory_mb": memory_mb, "cpu_s": int(timeout_s) + 2}, handle)
        with open(os.path.join(judged, "tests.py"), "w", encoding="utf-8") as handle:
            handle.write(tests)
        with open(os.path.join(judged, "spec.json"), "w", encoding="utf-8") as handle:
            json.dump({"entry_point": entry_point, "timeout_s": timeout_s}, handle)
        candidate = [sys.executable, "-I", RUNNER, folder]
        if use_bwrap(sandbox):
            candidate = jail(folder, candidate)
        command = [sys.executable, "-I", JUDGE, judged, *candidate]
        try:
            proc = spawn(command, judged, subprocess.PIPE)
        except OSError:
            return Outcome("crash")
        token = secrets.token_hex(16)  # only the judge's own verdict line carries it
        try:  # the judge enforces timeout_s; this is its own bound
            stdout, _ = proc.communicate(input=f"{token}\n".encode(), timeout=timeout_s + 10)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return Outcome("timeout")
        lines = [
            line[len(token) + 1 :] for line in stdout.decode(errors="replace").splitlines() if line.startswith(token)
        ]
        try:
            verdict = json.loads(lines[-1])
            return Outcome(str(verdict["status"]), int(verdict["passed"]), int(verdict["total"]),
                           verdict.get("detail"), verdict.get("first_failure"))  # fmt: skip
        except (ValueError, KeyError, TypeError, IndexError):
            return Outcome("crash")


@dataclass(frozen=True)
class ScriptRun:
    """What a tool script gave: ``ok``, ``error`` (it raised: the last traceback line) or ``timeout``."""

    status: str
    output: str


def run_script(code: str, timeout_s: float, memory_mb: int, sandbox: str, max_chars: int = 1000) -> ScriptRun:
    """Run model-written ``code`` as a script in the jail (same limits as a candidate program); its stdout,
    cut to ``max_chars``, is the output. Never raises."""
    with tempfile.TemporaryDirectory(prefix="rlpost_tool_") as folder:
        with open(os.path.join(folder, "program.py"), "w", encoding="utf-8") as handle:
            handle.write(code)
        with open(os.path.join(folder, "spec.json"), "w", encoding="utf-8") as handle:
            json.dump({"memory_mb": memory_mb, "cpu_s": int(timeout_s) + 2}, handle)
        command = [sys.executable, "-I", RUNNER, "--script", folder]
        if use_bwrap(sandbox):
            command = jail(folder, command)
        try:
            proc = spawn(command, folder, subprocess.DEVNULL)
        except OSError as err:
            return ScriptRun("error", str(err))
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return ScriptRun("timeout", f"the code ran past {timeout_s:g} s")
        if proc.returncode != 0:
            lines = stderr.decode(errors="replace").strip().splitlines()
            reason = lines[-1] if lines else f"exit code {proc.returncode}"
            return ScriptRun("timeout" if proc.returncode == -signal.SIGXCPU else "error", reason[:max_chars])
        return ScriptRun("ok", stdout.decode(errors="replace")[:max_chars])


def spawn(command: list[str], cwd: str, stdin: int) -> subprocess.Popen:
    """``command`` in its own session (a timeout kills its whole group) with a minimal environment."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
