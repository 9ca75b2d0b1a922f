"""A reward module of the user's own, in the directory ``rlpost`` is started in, imports without
PYTHONPATH (rlpost/rewards/callable.py), through the installed ``rlpost`` console script, which
unlike ``python -m`` does not put the current directory on sys.path. A module that is really
missing fails with one line saying where Python looked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlpost.rewards.base import ParamError
from rlpost.rewards.callable import CallableReward

from support.runs import QUICK

SCRIPT = Path(sys.executable).with_name("rlpost")  # the console script installed next to this python
REWARD = """import zlib


def f(prompts, completions, **kwargs):
    return [(zlib.crc32(str(c).encode()) % 100) / 100 for c in completions]
"""


def reward_terms(path: str) -> str:
    return f'reward.terms=[{{name: callable, weight: 1.0, params: {{path: "{path}"}}}}]'


def rlpost(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The console script in ``cwd``, with no PYTHONPATH (so nothing but rlpost puts ``cwd`` on sys.path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RLPOST_LAUNCHED")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
    return subprocess.run([str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "myrewards.py").write_text(REWARD)
    return tmp_path


def test_console_script_imports_a_reward_module_from_the_current_directory(user_dir):
    shown = rlpost(user_dir, "show", "model=tiny-random", reward_terms("myrewards:f"))
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "myrewards:f" in shown.stdout
    missing = rlpost(user_dir, "train", "model=tiny-random", reward_terms("nope_rewards:f"))
    assert missing.returncode == 2 and missing.stdout == ""
    (line,) = missing.stderr.strip().splitlines()
    assert line.startswith("rlpost: error: reward.terms[0].params.path: cannot import 'nope_rewards:f': ")
    assert f"No module named 'nope_rewards' (looked in the current directory {user_dir}, " in line
    assert "the standard library, site-packages " in line and "PYTHONPATH" in line
    assert not (user_dir / "outputs").exists()


def test_a_missing_import_inside_the_users_module_is_told_apart(tmp_path, monkeypatch):
    (tmp_path / "brokenrewards.py").write_text("import not_installed_anywhere\n\ndef f(**kwargs):\n    return []\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    with pytest.raises(ParamError) as err:
        CallableReward(CallableReward.Config(path="brokenrewards:f"))
    assert "No module named 'not_installed_anywhere' (raised inside brokenrewards: it was found" in str(err.value)
    assert sys.path[0] == str(tmp_path)  # put first, as python -m does


@pytest.mark.slow
def test_one_training_step_with_a_reward_from_the_current_directory(user_dir):
    """hydra.job.chdir=true: the job runs inside its run directory, the module lies in the launch directory."""
    quick = [o for o in QUICK if not o.startswith(("reward.terms", "train.steps"))]
    args = [*quick, reward_terms("myrewards:f"), "train.steps=1", "hydra.job.chdir=true", "hydra.run.dir=run"]
    done = rlpost(user_dir, "train", *args)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((user_dir / "run" / "summary.json").read_text())
    assert summary["steps"] == 1
    rows = [json.loads(line) for line in (user_dir / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("rewards/callable/mean" in row or "reward" in row for row in rows)
