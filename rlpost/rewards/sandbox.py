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
(``--unshare-all``; ``--die-with-parent``). What the jail runs is carried into it read-only wherever it
lives (``carried_paths``: the interpreter's prefixes and this package's folder), so a checkout or virtual
environment under ``/tmp`` still runs behind the private ``/tmp``. Without bwrap (``sandbox: none``, or ``auto`` on a machine
without it) the rlimits still hold but the program runs as the training user: it can read files (the
tests included), write where that user can, and reach the network. ``sandbox_available()`` tells callers.

A jail or judge that cannot start is the machine's fault, not the candidate's: the runner's first act is
to say so (a ``started`` message to the judge; ``STARTED`` on stderr in ``--script`` mode), and a call
whose runner never did (or whose judge gave no verdict) raises ``SandboxError`` with what the jail
printed, so the reward's ``on_failure`` policy takes it instead of a score of 0. The first such error of
a process is also logged once, in full.
"""

from __future__ import annotations

import functools
import json
import logging
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
STARTED = "rlpost-runner-started"  # code_runner.py's first stderr line in --script mode: the jail came up

logger = logging.getLogger(__name__)


class SandboxError(RuntimeError):
    """The jail, the interpreter or the judge could not start: an infrastructure fault, never a verdict."""


@functools.cache
def _report_once(message: str) -> None:
    logger.error("the code sandbox could not start (later failures of this kind are not logged again): %s", message)


def infrastructure_error(what: str, output: str) -> SandboxError:
    """A ``SandboxError`` for ``what`` with the first lines of what the process printed (logged once)."""
    text = " ".join(output.strip().splitlines()[-3:])[:500] or "no output"
    message = f"{what}: {text}"
    _report_once(message)
    return SandboxError(message)


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


def carried_paths() -> list[str]:
    """The folders a jailed program needs that the private ``/tmp`` could hide: the interpreter's prefixes
    (a virtual environment's and its base's) and this package's folder (the runner), deduplicated."""
    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.abspath(sys.executable)), os.path.dirname(RUNNER)]  # fmt: skip
    return sorted({os.path.realpath(p) for p in found} | {os.path.abspath(p) for p in found})


def jail(folder: str, command: list[str]) -> list[str]:
    """``command`` in bubblewrap: read-only root, a private /tmp with only ``folder`` in it writable, no network.
    ``carried_paths()`` are bound read-only over the private /tmp (a no-op for those outside it)."""
    carried = [arg for path in carried_paths() if path.startswith("/tmp/") for arg in ("--ro-bind", path, path)]
    return [
        "bwrap", "--ro-bind", "/", "/", "--tmpfs", "/tmp", *carried, "--bind", folder, folder, "--dev", "/dev",
        "--proc", "/proc", "--unshare-all", "--die-with-parent", "--chdir", folder, *command,
    ]  # fmt: skip


def execute(
    program: str, tests: str, entry_point: str | None, timeout_s: float, memory_mb: int, sandbox: str = "auto"
) -> Outcome:
    """Run ``program`` against ``tests`` (judge + jailed candidate). Whatever the program does is an ``Outcome``;
    only a jail or judge that cannot start raises (``SandboxError``)."""
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
        except OSError as err:
            raise infrastructure_error("the judge could not start", str(err)) from err
        token = secrets.token_hex(16)  # only the judge's own verdict line carries it
        try:  # the judge enforces timeout_s; this is its own bound
            stdout, stderr = proc.communicate(input=f"{token}\n".encode(), timeout=timeout_s + 10)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return Outcome("timeout")
        lines = [
            line[len(token) + 1 :] for line in stdout.decode(errors="replace").splitlines() if line.startswith(token)
        ]
        try:
            verdict = json.loads(lines[-1])
            outcome = Outcome(str(verdict["status"]), int(verdict["passed"]), int(verdict["total"]),
                              verdict.get("detail"), verdict.get("first_failure"))  # fmt: skip
        except (ValueError, KeyError, TypeError, IndexError):
            raise infrastructure_error("the judge gave no verdict", stderr.decode(errors="replace")) from None
        if outcome.status == "not_started":
            raise infrastructure_error("the jailed program could not start", outcome.detail or "")
        return outcome


@dataclass(frozen=True)
class ScriptRun:
    """What a tool script gave: ``ok``, ``error`` (it raised: the last traceback line) or ``timeout``."""

    status: str
    output: str


def run_script(code: str, timeout_s: float, memory_mb: int, sandbox: str, max_chars: int = 1000) -> ScriptRun:
    """Run model-written ``code`` as a script in the jail (same limits as a candidate program); its stdout,
    cut to ``max_chars``, is the output. Raises only ``SandboxError`` (the jail could not start)."""
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
            raise infrastructure_error("the python tool could not start", str(err)) from err
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return ScriptRun("timeout", f"the code ran past {timeout_s:g} s")
        printed = stderr.decode(errors="replace")
        if not printed.startswith(STARTED):
            raise infrastructure_error("the jailed program could not start", printed)
        stderr = printed[len(STARTED) + 1 :].encode()
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
