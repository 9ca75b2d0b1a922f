"""SafeCtrl-RL (data/env=safety_controller, seed 004 #6) in the real trainer: the tiny random policy picks strategies
for a tiny random frozen model, scored by a tiny random local judge (the real judge path, no server)."""

from __future__ import annotations

import math

import torch
from test_env_trainer import env_trainer

from support.trainer import step_logs

SAFETY_DATA = ["data=jsonl", "data.path=recipes/data/safety_prompts.jsonl",
               "data.eval_split=recipes/data/safety_prompts_eval.jsonl"]  # fmt: skip
# two strategies named by single tokens, picked without the keyword, so that a random policy picks them
STRATEGIES = "data.env.strategies=[{name: safe, description: be safe, system: Be safe.}, {name: stop}]"
CONTROLLER = [
    "data/env=safety_controller",
    "reward=env",
    *SAFETY_DATA,
    "data.env.worker_model=tiny-random",
    "data.env.worker_max_new_tokens=4",
    "data.env.max_turns=2",
    "+data.env.judge.model={source: tiny_random, name: tiny-random-llama}",
    STRATEGIES,
    "data.env.keyword=''",
]


def test_safety_controller_episodes_train_and_log_the_strategy_picks(tmp_path):
    trainer, _ = env_trainer([*CONTROLLER, "train.steps=2"], tmp_path)
    tok = trainer._tokenizer
    with torch.no_grad():  # first turns of "stop", "safe" or something else (a format failure)
        for word in ("stop", "safe"):
            trainer.model.lm_head.bias[tok.encode(word, add_special_tokens=False)[0]] = 8.0
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    logs = step_logs(trainer)
    keys = ["env/score_before", "env/score_after", "env/regenerations", "env/format_failures", "env/pick/safe",
            "env/pick/stop", "env/turns", "reward", "loss"]  # fmt: skip
    assert all(math.isfinite(log[k]) for log in logs for k in keys)
    assert all(0.0 < log["env/score_before"] < 1.0 and log["env/failures"] == 0 for log in logs)
    # the picks vary within the steps (stop: s_0; safe: a regeneration; anything else: the penalty), so the
    # rewards differ inside the groups and the policy moves
    assert sum(log["env/pick/safe"] + log["env/pick/stop"] for log in logs) > 0
    assert any(log["reward_std"] > 0 for log in logs)
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())
