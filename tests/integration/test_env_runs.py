"""Environment episodes through the real CLI: two processes, and a calculator run with its held-out eval."""

from __future__ import annotations

import json
import math

import pytest

from support.runs import QUICK, rlpost

EPISODES = [
    "data/env=callable",
    "data.env.path=support.envs:CountDown",
    "reward.terms=[{name: env, weight: 1.0}, {name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]",
]


def step_rows(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "loss" in r and "grad_norm" in r]


@pytest.mark.slow
def test_episodes_with_two_processes(tmp_path):
    run_dir = tmp_path / "run"
    two = [
        "hardware.num_processes=2",
        "hardware.device=cpu",
        "hardware.precision=fp32",
        "hardware.main_process_port=29653",
    ]
    done = rlpost([*QUICK, *EPISODES, *two, f"hydra.run.dir={run_dir}"], tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count("run directory:") == 2  # both processes ran the job
    steps = step_rows(run_dir)
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # episode metrics are means over both processes' episodes
        assert r["env/turns"] >= 1 and r["env/failures"] == 0 and math.isfinite(r["loss"]) and r["grad_norm"] > 0


def test_calculator_run_evaluates_episodes(tmp_path):
    run_dir = tmp_path / "run"
    args = [
        *QUICK,
        "data/env=calculator",
        "reward.terms=[{name: env, weight: 1.0}]",
        "eval.at_end=true",
        f"hydra.run.dir={run_dir}",
    ]
    done = rlpost(args, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    after = summary["after"]
    for key in ("eval/env/turns", "eval/env/tool_use", "eval/env/valid_call_rate", "eval/env/trained_tokens"):
        assert math.isfinite(after[key]), key
    assert after["eval/accuracy"] == after["eval/env"]  # the env term is the first (the accuracy) term
    sample = json.loads((run_dir / "samples.jsonl").read_text().splitlines()[0])
    assert sample["prompt"][0]["role"] == "system" and "<calc>" in sample["prompt"][0]["content"]  # the episode's start
    assert sample["completion"][0]["role"] == "assistant"
    items = json.loads((run_dir / "eval_items.json").read_text())  # each held-out episode: the policy's turns only
    assert len(items) == after["eval/num_prompts"] and all(isinstance(i["completion"], str) for i in items)
    assert not [i for i in items if sample["prompt"][0]["content"] in i["completion"]]  # no system message
