"""The judge of ``code_exec``: runs the tests and alone decides the verdict; the program runs elsewhere.

Run as a script by ``sandbox.execute`` (``python -I code_judge.py <judge folder> <candidate folder>``).
The tests (``tests.py``) and the limits are in the judge's folder, which the candidate's jail does not
mount. The judge starts the candidate (``code_runner.py``, in bubblewrap when the command says so), and
runs the test statements in its own namespace, where each function of the program is a proxy that sends
the call to the candidate and reads the result back as a Python literal (``ast.literal_eval``: a value,
never code). So the program cannot write the verdict, read the tests, or change what a test compares
with. The verdict goes to the parent as one line on stdout, the parent's nonce (read from stdin before
the candidate starts) then ``{"status", "passed", "total", "detail", "first_failure"}`` (the first failing
test statement and its error); the parent ignores any other line.
It imports nothing from rlpost.

Counting, as before: with an ``entry_point`` the tests define ``check(candidate)`` (HumanEval's form) and
each top-level statement of its body is run in order with ``candidate`` bound to the program's
``entry_point``; without one, the test code's own top-level statements are run. A statement that contains
an ``assert`` is one test; the others are setup. Statuses: ``ok``, ``syntax_error``, ``crash`` (the program
raised while loading, a setup statement raised, or the candidate broke the protocol), ``memory``,
``timeout`` (the whole run passed ``timeout_s``), ``no_entry_point``, and ``not_started`` (the runner never
said it started: the jail or its interpreter failed, which the parent raises as an infrastructure error); a timeout or a crash of the candidate
process scores no test, whatever passed before it.
"""

from __future__ import annotations

import ast
import json
import os
import select
import signal
import subprocess
import sys
import time


class CandidateGone(Exception):
    """The candidate died, timed out or broke the protocol."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status = status


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


class Candidate:
    """The candidate process: one request, one answer, within what is left of the deadline."""

    def __init__(self, command: list[str], deadline: float, stderr_path: str):
        self.deadline, self.stderr_path = deadline, stderr_path
        self.pending = b""  # bytes read from the candidate that are not yet a whole message
        # the candidate's stderr is kept (capped by its own file-size rlimit) only to explain a jail that
        # never started; once the runner has said "started", it is never read
        with open(stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True
            )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes
        self.requests, self.answers = self.proc.stdin, self.proc.stdout

    def start(self) -> str | None:
        """None once the runner said it started; else what the jail or interpreter printed as it failed."""
        try:
            if self.receive().get("status") == "started":
                return None
        except CandidateGone:
            pass
        with open(self.stderr_path, encoding="utf-8", errors="replace") as handle:
            return handle.read(4000) or "the candidate process exited before it started"

    def receive(self) -> dict:
        while b"\n" not in self.pending:  # "started" and the next message can arrive in one read
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.answers], [], [], left)[0]:
                raise CandidateGone("timeout", "the program ran past timeout_s")
            chunk = os.read(self.answers.fileno(), 1 << 16)
            if not chunk:
                code = self.proc.wait()
                raise CandidateGone("timeout" if code == -signal.SIGXCPU else "crash", f"the program exited ({code})")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            raise CandidateGone("crash", "the program wrote to the judge's channel") from None
        if not isinstance(message, dict):
            raise CandidateGone("crash", "the program wrote to the judge's channel")
        return message

    def call(self, name: str, args: tuple, kwargs: dict):
        request = {"call": name, "args": repr(args), "kwargs": repr(kwargs)}
        ast.literal_eval(request["args"]), ast.literal_eval(request["kwargs"])  # a non-literal argument fails here
        try:
            self.requests.write((json.dumps(request) + "\n").encode())
            self.requests.flush()
        except (BrokenPipeError, OSError):
            raise CandidateGone("crash", "the program closed its channel") from None
        answer = self.receive()
        if "ok" in answer:
            return ast.literal_eval(answer["ok"])
        if answer.get("memory"):
            raise MemoryError(answer.get("raised", ""))
        raise RuntimeError(f"the program raised {answer.get('raised', '?')}")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()


def judge(spec: dict, tests: str, command: list[str], stderr_path: str = os.devnull) -> dict:
    entry_point = spec.get("entry_point")
    try:
        prelude, body = test_statements(tests, entry_point)
    except (SyntaxError, ValueError) as err:
        return {"status": "syntax_error", "passed": 0, "total": 0, "detail": str(err)[:200]}
    total = sum(has_assert(stmt) for stmt in body)
    candidate = Candidate(command, time.monotonic() + float(spec["timeout_s"]), stderr_path)
    try:
        failed_start = candidate.start()
        if failed_start is not None:  # the machine's fault, not the program's: the parent raises SandboxError
            return {"status": "not_started", "passed": 0, "total": total, "detail": failed_start}
        loaded = candidate.receive()
        if loaded.get("status") != "loaded":
            return {
                "status": str(loaded.get("status", "crash")),
                "passed": 0,
                "total": total,
                "detail": loaded.get("detail"),
            }
        namespace: dict = {"__name__": "__main__"}
        for key, text in loaded.get("values", {}).items():
            namespace[key] = ast.literal_eval(text)
        for name in loaded.get("callables", []):
            namespace[name] = lambda *a, _name=name, **k: candidate.call(_name, a, k)
        try:
            exec(compile(ast.Module(body=prelude, type_ignores=[]), "tests.py", "exec"), namespace)
        except CandidateGone:
            raise
        except BaseException as err:  # noqa: BLE001 - a test prelude that fails: nothing can be tested
            return {"status": "crash", "passed": 0, "total": total, "detail": repr(err)[:200]}
        if entry_point is not None:
            if entry_point not in loaded.get("callables", []):
                return {"status": "no_entry_point", "passed": 0, "total": total, "detail": entry_point}
            namespace["candidate"] = namespace[entry_point]
        passed, status, detail, failure = 0, "ok", None, None
        for stmt in body:
            is_test = has_assert(stmt)
            try:
                exec(compile(ast.Module(body=[stmt], type_ignores=[]), "tests.py", "exec"), namespace)
                passed += is_test
            except CandidateGone:
                raise
            except MemoryError:
                status, detail = "memory", "MemoryError in a test"
            except BaseException as err:  # noqa: BLE001
                if not is_test and status == "ok":
                    status, detail = "crash", f"setup failed: {err!r}"[:200]
                if is_test and failure is None:  # what a repair loop shows the policy
                    failure = f"{ast.unparse(stmt)[:200]}  ->  {type(err).__name__}: {err}"[:300]
        return {"status": status, "passed": passed, "total": total, "detail": detail, "first_failure": failure}
    except CandidateGone as gone:  # a hang, a death or a broken channel scores nothing, whatever passed before
        return {"status": gone.status, "passed": 0, "total": total, "detail": str(gone)}
    finally:
        candidate.stop()


def main() -> None:
    token = sys.stdin.readline().strip()  # the parent's nonce, read before the candidate exists
    sys.stdin.close()
    judge_folder, command = sys.argv[1], sys.argv[2:]
    with open(os.path.join(judge_folder, "spec.json"), encoding="utf-8") as handle:
        spec = json.load(handle)
    with open(os.path.join(judge_folder, "tests.py"), encoding="utf-8") as handle:
        tests = handle.read()
    verdict = judge(spec, tests, command, os.path.join(judge_folder, "candidate_stderr.txt"))
    sys.stdout.write(f"{token} {json.dumps(verdict)}\n")


if __name__ == "__main__":
    main()
