"""The candidate's side of ``code_exec``: load a model-written program and answer calls to its functions.

Run as a script (``python -I code_runner.py <folder>``), under bubblewrap when the machine has it, by the
judge (``code_judge.py``), which holds the tests: this process never sees them and never reports a
verdict, so nothing the program does here can forge one. It imports nothing from rlpost (it must not load
torch). Protocol, one JSON object per line on stdin / stdout (the program's own prints go to /dev/null):

    -> {"status": "started"}                                                 first of all (the jail came up)
    -> {"status": "loaded", "callables": [names], "values": {name: repr}}   after the program ran, or
    -> {"status": "syntax_error" | "crash" | "memory", "detail": ...}        and exit
    <- {"call": name, "args": repr(tuple), "kwargs": repr(dict)}             from the judge
    -> {"ok": repr(result)} | {"raised": "...", "memory": bool}

Arguments and results travel as Python literals (``repr`` here, ``ast.literal_eval`` on the other side),
so a value that is not a literal (a generator, an object) fails the test that needed it. Limits, set here
before the program is read (``set_limits``): address space ``memory_mb``, CPU seconds, 16 MiB files, no core
dumps, and at most 64 processes for a non-root user.
"""

from __future__ import annotations

import ast
import io
import json
import os
import resource
import sys


def set_limits(memory_mb: int, cpu_s: int) -> None:
    """Address space, CPU seconds, file size (16 MiB), core dumps (none) and processes of this process."""
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(
        resource.RLIMIT_NPROC, (64, 64)
    )  # a fork bomb stops at 64 (root ignores it: the jail's pid namespace and the timeout remain)


def literal(value: object) -> str:
    """``repr`` of a value the judge can read back with ``ast.literal_eval`` (else ValueError)."""
    text = repr(value)
    ast.literal_eval(text)
    return text


def serve(folder: str, out: io.TextIOBase, inp: io.TextIOBase) -> None:
    def send(message: dict) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    send({"status": "started"})
    with open(os.path.join(folder, "spec.json"), encoding="utf-8") as handle:
        spec = json.load(handle)
    set_limits(int(spec["memory_mb"]), int(spec["cpu_s"]))
    program = open(os.path.join(folder, "program.py"), encoding="utf-8").read()
    try:
        code = compile(program, "program.py", "exec")
    except (SyntaxError, ValueError) as err:
        return send({"status": "syntax_error", "detail": str(err)[:200]})
    namespace: dict = {"__name__": "__main__"}
    try:
        exec(code, namespace)
    except MemoryError:
        return send({"status": "memory", "detail": "MemoryError while loading"})
    except BaseException as err:  # noqa: BLE001 - any failure of untrusted code is a crash, SystemExit too
        return send({"status": "crash", "detail": repr(err)[:200]})
    callables = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("__"))
    values = {}
    for key, value in namespace.items():
        if not key.startswith("__") and not callable(value):
            try:
                values[key] = literal(value)
            except Exception:  # noqa: BLE001 - a module, an object: not a value the tests can use
                pass
    send({"status": "loaded", "callables": callables, "values": values})
    for line in inp:
        request = json.loads(line)
        try:
            args, kwargs = ast.literal_eval(request["args"]), ast.literal_eval(request["kwargs"])
            send({"ok": literal(namespace[request["call"]](*args, **kwargs))})
        except MemoryError:
            send({"raised": "MemoryError", "memory": True})
        except BaseException as err:  # noqa: BLE001
            send({"raised": repr(err)[:200], "memory": False})


STARTED = "rlpost-runner-started"  # sandbox.STARTED: --script mode's first stderr line (the jail came up)


def run_script(folder: str) -> None:
    """``--script`` mode (the python tool of data/env=python): run program.py with its prints on stdout."""
    print(STARTED, file=sys.stderr, flush=True)
    with open(os.path.join(folder, "spec.json"), encoding="utf-8") as handle:
        spec = json.load(handle)
    set_limits(int(spec["memory_mb"]), int(spec["cpu_s"]))
    sys.stdin = io.StringIO()
    program = open(os.path.join(folder, "program.py"), encoding="utf-8").read()
    exec(compile(program, "tool.py", "exec"), {"__name__": "__main__"})  # errors: a traceback on stderr


def main() -> None:
    if sys.argv[1] == "--script":
        os.chdir(sys.argv[2])
        return run_script(sys.argv[2])
    os.chdir(sys.argv[1])  # the candidate's scratch folder: the only place it may write
    out = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="utf-8")  # the protocol channel
    inp = io.TextIOWrapper(os.fdopen(os.dup(0), "rb"), encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # the program's prints (and its os.write(1, ...)) go nowhere
    sys.stdout, sys.stdin = open(os.devnull, "w", encoding="utf-8"), io.StringIO()  # noqa: SIM115
    serve(sys.argv[1], out, inp)


if __name__ == "__main__":
    main()
