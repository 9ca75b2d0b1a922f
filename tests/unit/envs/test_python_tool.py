"""data/env=python: model-written tool code runs in the jail; hostile or hanging code is an error observation and
the episode goes on; without a jail the environment refuses to start unless the user accepts the risk."""

from __future__ import annotations

import os
import uuid

import pytest

import rlpost.components  # noqa: F401  (registers every component)
import rlpost.envs.python as python_env
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.envs.base import build_env
from rlpost.rewards.sandbox import sandbox_available

needs_jail = pytest.mark.skipif(
    not sandbox_available(), reason="bubblewrap is not installed here (make setup installs it as root)"
)
ROW = {"prompt": [{"role": "user", "content": "Calculate 123 * 456."}], "answer": "56088"}


def tool(**kw):
    env = build_env({"name": "python", "tool_timeout_s": 2.0, **kw})
    env.reset(ROW)
    return env


def test_the_tool_prints_and_the_final_answer_is_scored():
    env = tool(allow_unjailed_code=True)
    step = env.step("<python>print(123 * 456)</python>")
    assert [o["content"] for o in step.observations] == ["<result>56088</result>"] and not step.done
    assert (
        env.step("<python>1/0</python>").observations[0]["content"]
        == "<error>ZeroDivisionError: division by zero</error>"
    )
    final = env.step("It is 56088.")
    assert final.done and final.reward == 1.0


@needs_jail
def test_hostile_and_hanging_tool_code_fails_and_the_episode_goes_on(tmp_path):
    env = tool()
    home = os.path.expanduser(f"~/rlpost_escape_{uuid.uuid4().hex}")
    hostile = [
        "import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)",  # no network
        f"open({home!r}, 'w').write('x')",  # no writes outside the scratch folder
        f"open({str(tmp_path / 'x')!r}, 'w').write('x')",
        "while True: pass",  # a tool that hangs is killed at tool_timeout_s
    ]
    step = env.step(" ".join(f"<python>{code}</python>" for code in hostile))
    texts = [o["content"] for o in step.observations]
    assert all(t.startswith("<error>") for t in texts), texts
    assert "unreachable" in texts[0] or "Errno" in texts[0]
    assert "Read-only file system" in texts[1] and "ran past 2 s" in texts[3]
    assert step.info == {"tool_calls": 4, "tool_errors": 4}
    assert not os.path.exists(home) and not (tmp_path / "x").exists()
    assert env.step("<python>print(2 + 2)</python>").observations[0]["content"] == "<result>4</result>"


def test_without_a_jail_it_refuses_unless_the_risk_is_accepted(monkeypatch):
    base = ["model=tiny-random", "data/env=python", "reward=env"]
    with pytest.raises(ConfigError, match="data.env.sandbox=none.*allow_unjailed_code=true"):
        build_run(compose([*base, "data.env.sandbox=none"]))
    monkeypatch.setattr(python_env, "sandbox_available", lambda: False)  # a machine without bubblewrap
    with pytest.raises(ConfigError, match="bubblewrap is not available here.*read your files.*network"):
        build_run(compose(base))
    with pytest.raises(ConfigError, match="sandbox=bwrap but bubblewrap is not available"):
        build_run(compose([*base, "data.env.sandbox=bwrap"]))
    run = build_run(compose([*base, "data.env.allow_unjailed_code=true"]))
    assert python_env.jail_mode(run.env.cfg) == "none"
    with pytest.raises(ConfigError, match="tool_timeout_s=20 must be below data.env.step_timeout_s=15"):
        build_run(compose([*base, "data.env.allow_unjailed_code=true", "data.env.tool_timeout_s=20"]))
