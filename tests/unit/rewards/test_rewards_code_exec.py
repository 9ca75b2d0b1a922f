"""code_exec (rlpost/rewards/code_exec.py + sandbox.py + code_runner.py): hand-checked outcomes of real
child processes (correct, wrong, partial, infinite loop, memory hog, syntax error, crash), HumanEval data,
config errors, and 2 tiny-random trainer steps on data=human_eval."""

from __future__ import annotations

import math

import pytest

import rlpost.rewards.code_exec  # noqa: F401  (registers)
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.code_exec import extract_code
from rlpost.scoring.terms import build_reward_terms

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TESTS = (
    "def check(candidate):\n"
    "    x = 1\n"  # setup: not a test
    "    assert candidate(1, 2) == 3\n"
    "    assert candidate(0, 0) == 0\n"
    "    assert candidate(2, 2) == 4\n"
    "    for a in range(3):\n"  # one test (a loop of asserts counts once)
    "        assert candidate(a, 0) == a\n"
)


def make(**params):
    cls = REWARDS.get("code_exec")
    return cls(build_config(cls.Config, {"timeout_s": 2.0, "memory_mb": 256, **params}, "test"))


def score(completions, tests=TESTS, entry="add", prompt=PROMPT, **params):
    logged = {}
    n = len(completions)
    rewards = make(**params)(
        prompts=["p"] * n,
        completions=completions,
        test=[tests] * n,
        entry_point=[entry] * n,
        code_prompt=[prompt] * n,
        log_metric=logged.__setitem__,
    )
    return rewards, logged


def fenced(code):
    return f"Here it is:\n```python\n{code}```\nDone."


def test_correct_wrong_partial_by_hand():
    correct = fenced("def add(a, b):\n    return a + b\n")
    wrong = fenced("def add(a, b):\n    return -1\n")
    # a * b: (1,2)->2 fails, (0,0)->0 passes, (2,2)->4 passes, loop (a*0==a fails at a=1) -> 2 of 4
    partial = fenced("def add(a, b):\n    return a * b\n")
    body_only = "    return a + b\n"  # a completion of the prompt's body: the prompt is put before it
    rewards, logged = score([correct, wrong, partial, body_only])
    assert rewards == [1.0, 0.0, 0.5, 1.0]
    assert logged["code_exec/ok"] == 1.0 and logged["code_exec/all_pass"] == 0.5
    all_pass, _ = score([correct, partial], score="all_pass")
    assert all_pass == [1.0, 0.0]


def test_loop_hog_syntax_crash_score_zero_with_counters():
    loop = fenced("def add(a, b):\n    while True:\n        pass\n")
    hog = fenced("def add(a, b):\n    return a + b\nblob = [0] * (10 ** 9)\n")  # 8 GB > 256 MB limit
    syntax = fenced("def add(a, b)\n    return a + b\n")
    crash = fenced("raise SystemExit(3)\n")
    no_entry = fenced("def plus(a, b):\n    return a + b\n")
    rewards, logged = score([loop, hog, syntax, crash, no_entry], prompt=None)
    assert rewards == [0.0] * 5
    for status in ("timeout", "memory", "syntax_error", "crash", "no_entry_point"):
        assert logged[f"code_exec/{status}"] == pytest.approx(1 / 5), status
    assert logged["code_exec/ok"] == 0.0
    # "timeout" is only reported when the 2 s wall limit (or RLIMIT_CPU) stopped the child: it was killed


def test_memory_hog_inside_a_test_and_plain_asserts():
    hog = fenced("def add(a, b):\n    return [0] * (10 ** 9)\n")
    rewards, logged = score([hog])
    assert rewards == [0.0] and logged["code_exec/memory"] == 1.0
    # no entry point: the test code's top-level asserts run after the program; 1 of 2 passes
    plain = "assert x == 2\nassert y == 3\n"
    rewards, _ = score(["x = 2\ny = 4\n"], tests=plain, entry=None, prompt=None, entry_point_column=None)
    assert rewards == [0.5]


def test_extraction_and_unscorable_rows():
    assert extract_code("a\n```python\nx = 1\n```\n```python\ny = 2\n```", "auto") == "x = 1\n"
    assert extract_code("```\nx = 1", "auto") == "x = 1"  # unclosed fence: generation cut off
    assert extract_code("x = 1", "auto") == "x = 1" and extract_code("x = 1", "fenced") is None
    assert extract_code("```py\nx\n```", "whole") == "```py\nx\n```"
    rewards, logged = score(["def add(a, b): return a + b"], extract="fenced")
    assert rewards == [0.0] and logged["code_exec/no_code"] == 1.0
    reward = make()
    out = reward(
        prompts=["p", "p"], completions=["x", "y"], test=[None, ""], entry_point=["f", "f"], code_prompt=["", ""]
    )
    assert out == [None, None]


def test_human_eval_rows_canonical_solution_passes():
    from rlpost.data.sources import DataConfig, load_datasets

    train, evals = load_datasets(DataConfig(source="human_eval", train_size=None, eval_size=8))
    assert len(train) + len(evals) == 164
    row = train[0]
    assert {"prompt", "answer", "test", "entry_point", "code_prompt", "task_id"} <= set(row)
    assert row["code_prompt"] in row["prompt"][0]["content"]
    rows = [train[i] for i in range(3)]
    completions = [fenced(r["answer"]) for r in rows] + ["```python\ndef nope(:\n```"]
    rows.append(rows[0])
    rewards = make(timeout_s=5.0, memory_mb=1024)(
        prompts=[r["prompt"] for r in rows],
        completions=completions,
        test=[r["test"] for r in rows],
        entry_point=[r["entry_point"] for r in rows],
        code_prompt=[r["code_prompt"] for r in rows],
    )
    assert rewards == [1.0, 1.0, 1.0, 0.0]


def test_bad_params_are_config_errors():
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.timeout_s"):
        build_reward_terms([{"name": "code_exec", "params": {"timeout_s": 0}}])
    with pytest.raises(ConfigError, match=r"memory_mb"):
        build_reward_terms([{"name": "code_exec", "params": {"memory_mb": 8}}])
    with pytest.raises(ConfigError, match="score"):
        build_reward_terms([{"name": "code_exec", "params": {"score": "best"}}])


def test_two_trainer_steps_on_human_eval(tmp_path):
    from support.trainer import make_run, step_logs, train_rlpost

    run = make_run(
        [
            "data=human_eval",
            "train.steps=2",
            "train.num_generations=2",
            "train.completions_per_step=4",
            "reward.terms=[{name: code_exec, params: {timeout_s: 2.0, extract: whole}}]",
        ]
    )
    trainer = train_rlpost(run, tmp_path)
    logs = step_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        assert math.isfinite(log["rewards/code_exec/mean"]) and 0.0 <= log["rewards/code_exec/mean"] <= 1.0
        rates = [log[f"code_exec/{s}"] for s in ("ok", "syntax_error", "crash", "memory", "timeout", "no_entry_point")]
        assert sum(rates) == pytest.approx(1.0)  # every completion got exactly one status


def test_recipe_composes():
    from rlpost.app import compose
    from rlpost.build import build_run

    run = build_run(compose(["recipe=code_exec", "model=tiny-random"]))
    assert run.data.source == "human_eval" and run.reward.names == ["code_exec"]
