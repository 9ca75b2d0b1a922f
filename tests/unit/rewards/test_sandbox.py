"""Model-written code cannot reach the machine or forge its verdict (rlpost/rewards/sandbox.py, code_judge.py,
code_runner.py): hostile programs against the real judge and, where bubblewrap works, the real jail.

Each hostile program is wrong or escapes, so it must score no test, and the next call must work as usual."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import rlpost
import rlpost.rewards.code_exec  # noqa: F401  (registers)
import rlpost.rewards.sandbox as sandbox_module
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.sandbox import SandboxError, execute, run_script, sandbox_available
from rlpost.scoring.guard import FailurePolicy, GuardedReward, RewardFailure

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


@needs_jail
def test_a_virtual_environment_under_tmp_runs_in_the_jail(tmp_path):
    # the jail mounts a private /tmp: an interpreter and a package that live under /tmp must be carried in
    # read-only, or every program "fails" (issue 46: a checkout under /tmp scored every program 0)
    assert str(tmp_path).startswith("/tmp/")
    venv, src = tmp_path / "venv", tmp_path / "src"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    shutil.copytree(Path(rlpost.__file__).parent, src / "rlpost", ignore=shutil.ignore_patterns("__pycache__"))
    site = next((venv / "lib").glob("python3*/site-packages"))
    outer = [p for p in sys.path if p.endswith("site-packages")]  # torch, transformers, ... of this venv
    (site / "outer.pth").write_text("\n".join([str(src), *outer]) + "\n")
    script = (
        "import json, rlpost.rewards.sandbox as sb\n"
        "from rlpost.envs.python import PythonTool\n"
        "from rlpost.rewards.base import REWARDS\n"
        "from rlpost.core.schema import build_config\n"
        "import rlpost.rewards.code_exec\n"
        f"out = sb.execute({CORRECT!r}, {TESTS!r}, 'add', 5.0, 256, 'bwrap')\n"
        "cls = REWARDS.get('code_exec')\n"
        "reward = cls(build_config(cls.Config, {'sandbox': 'bwrap', 'memory_mb': 256}, 'test'))\n"
        f"scores = reward(prompts=['p'], completions=[{CORRECT!r}], test=[{TESTS!r}], entry_point=['add'],"
        " code_prompt=[None])\n"
        "tool = PythonTool(build_config(PythonTool.Config, {'sandbox': 'bwrap'}, 'data.env'))\n"
        "print(json.dumps({'runner': sb.RUNNER, 'outcome': [out.status, out.passed, out.total], 'scores': scores,"
        " 'tool': tool.use_tool('print(6 * 7)')}))\n"
    )
    child = [str(venv / "bin" / "python"), "-c", script]  # from tmp_path: the checkout is not on its path
    done = subprocess.run(child, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["runner"].startswith(str(src))  # the package that ran is the copy under /tmp
    assert result["outcome"] == ["ok", 2, 2]
    assert result["scores"] == [1.0]
    assert result["tool"] == [True, "<result>42</result>"]


@pytest.mark.parametrize("sandbox", ["auto", "none"])
def test_a_jail_that_cannot_start_is_an_infrastructure_error(sandbox, monkeypatch):
    # the runner is missing, as when the jail hides it: no program ran, so nothing may score it 0
    monkeypatch.setattr(sandbox_module, "RUNNER", "/nonexistent/code_runner.py")
    with pytest.raises(SandboxError, match="could not start.*code_runner.py"):
        run(CORRECT, sandbox=sandbox)
    with pytest.raises(SandboxError, match="could not start"):
        run_script("print(1)", 5.0, 256, sandbox)
    # under a reward's failure policy it is a failed sample (skip -> None, abort -> stop), never a 0.0
    cls = REWARDS.get("code_exec")
    reward = cls(build_config(cls.Config, {"sandbox": sandbox, "memory_mb": 256}, "test"))
    columns = {"test": [TESTS] * 2, "entry_point": ["add"] * 2, "code_prompt": [None] * 2}
    skipped = GuardedReward(reward, FailurePolicy(on_failure="skip"))
    assert skipped(prompts=["p", "p"], completions=[CORRECT, CORRECT], **columns) == [None, None]
    assert skipped.take_failures() == 2
    with pytest.raises(RewardFailure, match="SandboxError"):
        GuardedReward(reward, FailurePolicy(on_failure="abort"))(
            prompts=["p"], completions=[CORRECT], **{k: v[:1] for k, v in columns.items()}
        )
