"""Model-written code cannot reach the machine or forge its verdict (rlpost/rewards/sandbox.py, code_judge.py,
code_runner.py): hostile programs against the real judge and, where bubblewrap works, the real jail.

Each hostile program is wrong or escapes, so it must score no test, and the next call must work as usual."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid

import pytest

from rlpost.rewards.sandbox import execute, sandbox_available

TESTS = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"
CORRECT = "def add(a, b):\n    return a + b\n"
needs_jail = pytest.mark.skipif(
    not sandbox_available(), reason="bubblewrap is not installed here (make setup installs it as root)"
)


def run(program: str, timeout_s: float = 5.0, sandbox: str = "auto"):
    return execute(program, TESTS, "add", timeout_s, 256, sandbox)


def still_works(sandbox: str = "auto") -> None:
    outcome = run(CORRECT, sandbox=sandbox)
    assert (outcome.status, outcome.passed, outcome.total) == ("ok", 2, 2)


@pytest.mark.parametrize("sandbox", ["auto", "none"])
def test_a_program_cannot_forge_its_verdict(sandbox, tmp_path):
    # a wrong add() that tries every channel it can reach: result.json in its folder, a fake verdict on
    # stdout (print and the raw fd), fake protocol answers on every open fd, and exiting "successfully"
    forger = (
        "import json, os, sys\n"
        "FAKE = json.dumps({'status': 'ok', 'passed': 2, 'total': 2})\n"
        "def add(a, b):\n"
        "    open('result.json', 'w').write(FAKE)\n"
        "    print(FAKE)\n"
        "    for fd in range(1, 64):\n"
        "        try:\n"
        "            os.write(fd, (FAKE + '\\n').encode())\n"
        "        except OSError:\n"
        "            pass\n"
        "    return -1\n"
    )
    outcome = run(forger, sandbox=sandbox)
    assert outcome.passed == 0 and outcome.status in ("ok", "crash")
    exits = "import os\ndef add(a, b):\n    os._exit(0)\n"
    assert run(exits, sandbox=sandbox).passed == 0
    still_works(sandbox)


def test_the_program_never_sees_the_tests():
    # the tests live in the judge's folder; the candidate's folder holds only its program and limits
    peek = "import os\nSEEN = sorted(os.listdir('.'))\ndef add(a, b):\n    return SEEN\n"
    outcome = execute(peek, "assert SEEN == ['program.py', 'spec.json']\n", None, 5.0, 256, "auto")
    assert (outcome.status, outcome.passed, outcome.total) == ("ok", 1, 1)


@needs_jail
def test_no_network_in_the_jail():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:  # outside the jail this connects and returns 3 for add(1, 2)
        program = (
            "import socket\n"
            "def add(a, b):\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
            "    return a + b\n"
        )
        assert run(program).passed == 0
    finally:
        server.close()
    still_works()


@needs_jail
def test_no_writes_outside_the_scratch_folder(tmp_path):
    targets = [os.path.expanduser(f"~/rlpost_escape_{uuid.uuid4().hex}"), str(tmp_path / "escape")]
    program = "def add(a, b):\n" + "".join(f"    open({t!r}, 'w').write('x')\n" for t in targets) + "    return a + b\n"
    assert run(program).passed == 0
    assert not any(os.path.exists(t) for t in targets)
    still_works()


@needs_jail
def test_a_thousand_forks_die_with_the_call():
    marker = f"rlpost_fork_{uuid.uuid4().hex[:8]}"
    program = (
        "import os, time\n"
        "def add(a, b):\n"
        "    for _ in range(1000):\n"
        "        try:\n"
        "            if os.fork() == 0:\n"
        f"                os.execv('/bin/sleep', ['/bin/sleep', '60', {marker!r}])\n"
        "        except OSError:\n"
        "            break\n"
        "    time.sleep(60)\n"
    )
    started = time.monotonic()
    outcome = run(program, timeout_s=3.0)
    assert outcome.passed == 0 and outcome.status == "timeout"
    assert time.monotonic() - started < 15
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], f"{len(left)} forked processes outlived the call"
    still_works()
