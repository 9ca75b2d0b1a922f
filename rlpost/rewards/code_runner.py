"""The child side of ``code_exec``: run a candidate program and count the test statements that pass.

Run as a script by ``rlpost.rewards.sandbox`` (``python -I code_runner.py <dir>``) inside a fresh
temporary directory holding ``program.py``, ``tests.py`` and ``spec.json`` (entry point and limits; the
limits are set first, ``set_limits``);
it writes ``result.json`` there: ``{"status": ..., "passed": k, "total": n, "detail": ...}``. It imports
nothing from rlpost (the child must not load torch).

Tests: with an ``entry_point``, the test code must define ``check(candidate)`` (HumanEval's form): each
top-level statement of ``check``'s body is run in order, with ``candidate`` bound to the program's
``entry_point``; without one, the test code's own top-level statements are. A statement that
contains an ``assert`` is one test (a ``for`` loop of asserts counts once); the others are setup and
run without being counted. A failing test is counted and the run continues; statuses: ``ok``,
``syntax_error`` (program or tests do not compile), ``crash`` (the program raised while loading, or a
setup statement raised), ``memory`` (a ``MemoryError`` anywhere), ``no_entry_point``.
"""

from __future__ import annotations

import ast
import io
import json
import os
import resource
import sys


def has_assert(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(node))


def test_statements(tests: str, entry_point: str | None) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """(module-level statements to run first, statements to run one by one as setup/tests)."""
    tree = ast.parse(tests, "tests.py")
    if entry_point is None:
        return [], tree.body
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        raise SyntaxError("tests define no check(candidate) function")
    prelude = [n for n in tree.body if n is not checks[-1]]
    return prelude, checks[-1].body


def set_limits(memory_mb: int, cpu_s: int) -> None:
    """Address space, CPU seconds, file size (16 MiB) and core dumps (none) of this process."""
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run(folder: str) -> dict:
    with open(os.path.join(folder, "spec.json"), encoding="utf-8") as handle:
        spec = json.load(handle)
    set_limits(int(spec["memory_mb"]), int(spec["cpu_s"]))
    entry_point = spec.get("entry_point")
    program = open(os.path.join(folder, "program.py"), encoding="utf-8").read()
    tests = open(os.path.join(folder, "tests.py"), encoding="utf-8").read()
    try:
        code = compile(program, "program.py", "exec")
        prelude, body = test_statements(tests, entry_point)
    except (SyntaxError, ValueError) as err:
        return {"status": "syntax_error", "passed": 0, "total": 0, "detail": str(err)[:200]}
    total = sum(has_assert(stmt) for stmt in body)
    namespace: dict = {"__name__": "__main__"}
    try:
        exec(code, namespace)
        exec(compile(ast.Module(body=prelude, type_ignores=[]), "tests.py", "exec"), namespace)
    except MemoryError:
        return {"status": "memory", "passed": 0, "total": total, "detail": "MemoryError while loading"}
    except BaseException as err:  # noqa: BLE001 - any failure of untrusted code is a crash, SystemExit too
        return {"status": "crash", "passed": 0, "total": total, "detail": repr(err)[:200]}
    if entry_point is not None:
        if entry_point not in namespace:
            return {"status": "no_entry_point", "passed": 0, "total": total, "detail": entry_point}
        namespace["candidate"] = namespace[entry_point]
    passed, status, detail = 0, "ok", None
    for stmt in body:
        is_test = has_assert(stmt)
        try:
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), "tests.py", "exec"), namespace)
            passed += is_test
        except MemoryError:
            status, detail = "memory", "MemoryError in a test"
        except BaseException as err:  # noqa: BLE001
            if not is_test and status == "ok":
                status, detail = "crash", f"setup failed: {err!r}"[:200]
    return {"status": status, "passed": passed, "total": total, "detail": detail}


def main() -> None:
    folder = sys.argv[1]
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - the candidate's prints go nowhere
    sys.stdin = io.StringIO()
    result = run(folder)
    with open(os.path.join(folder, "result.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
