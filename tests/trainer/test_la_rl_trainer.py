"""LA-RL (data/env=diagnose_revise, seed 000 #19) in the real trainer: the tiny random model, 2 steps.

The tiny model's logits get a bias towards single digits and the end-of-turn token (``digits_and_short_turns``),
so its three turns are short and often numbers: some episodes are right and some are not, the group has
reward variance and the update moves. The model is still the real one, sampling real turns."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_env_trainer import ends_turns_soon

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.data.sources import load_datasets
from rlpost.envs.diagnose_revise import parse_diagnosis
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.rewards.math_answer import gold_number, last_number

from support.rollouts import Recorder
from support.trainer import TINY, grpo_args, step_logs

# the episode reward (column 0) and a hash of the text: the tiny model is rarely right, the hash gives every group
# a spread to follow, so parameters move even when no episode scores
ENV_AND_HASH = "reward.terms=[{name: env, weight: 1.0}, {name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"
ROWS = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in [(1, 2), (3, 4), (2, 2), (5, 3)]]


def digits_and_short_turns(model, tok) -> None:
    ends_turns_soon(model, tok, bias=9.5)  # p(end of turn) ~ 0.3 against ten digits at 8.0: turns of a few tokens
    with torch.no_grad():
        for d in range(10):  # single-digit tokens (SmolLM2's tokenizer splits numbers into digits)
            (token,) = tok.encode(str(d), add_special_tokens=False)
            model.lm_head.bias[token] = 8.0


def test_la_rl_trains_the_three_turns_on_the_episode_reward(tmp_path):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "eval.jsonl").write_text(json.dumps({"question": "What is 4 + 4?", "answer": "8"}) + "\n")
    data = ["data=jsonl", f"data.path={tmp_path / 'train.jsonl'}", f"data.eval_split={tmp_path / 'eval.jsonl'}"]
    run = build_run(compose([*TINY, *data, "data.eval_size=1", "eval.size=1", "recipe=la_rl", "model=tiny-random",
                             "train.steps=2", "train.max_completion_length=6", "train.learning_rate=1e-3",
                             ENV_AND_HASH]))  # fmt: skip
    train_set, _ = load_datasets(run.data)
    tok, model = load_tokenizer(run.model), load_model(run.model)
    digits_and_short_turns(model, tok)
    trainer = Recorder(model=model, args=grpo_args(run, tmp_path / "out"), train_dataset=train_set,
                       processing_class=tok, run=run)  # fmt: skip
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters()), "no parameter moved"

    rewards = []
    for batch in trainer.batches:
        for i, row in enumerate(batch["rows"]):
            said = [m["content"] for m in row["rlpost_env_messages"] if m["role"] == "assistant"]
            gold = gold_number(row["answer"])
            spans = row["rlpost_env_spans"]
            assert len(spans) == len(said) and batch["completion_mask"][i].sum() >= sum(e - s for s, e in spans)
            if len(said) >= 2:  # the diagnose instruction came after the first answer, listing the labels
                asked = row["rlpost_env_messages"][1]["content"]
                assert "Which of these labels apply: correct, wrong_operation" in asked
            # R = 1.0 x final correct + 0.5 x first correct + 0.2 x format, recomputed from the transcript
            right = [last_number(t) == gold for t in said]
            ended = row["rlpost_env_ended"]
            first = 0.5 * right[0] if not (len(said) == 1 and ended == "truncated") else 0.0  # turn 1 answered
            done = len(said) == 3 and ended == "done"
            final = 1.0 * right[2] if done else 0.0
            labels = trainer.run.env.cfg.labels
            fmt = done and parse_diagnosis(said[1], labels, "correct")[1] and None not in map(last_number, said[::2])
            assert batch["terms"][i, 0].item() == pytest.approx(first + final + 0.2 * fmt)
            rewards.append(batch["terms"][i, 0].item())
    # the tiny model rarely scores (the formula's other cases: tests/unit/envs/test_diagnose_revise.py); the
    # combined reward (episode + hash) must spread within groups for the update to follow it
    combined = torch.cat([b["rewards"] for b in trainer.batches])
    assert len(rewards) == combined.numel() and combined.view(-1, trainer.num_generations).std(1).gt(0).any()

    logs = step_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        for key in ("first_correct", "final_correct", "format_valid", "diagnosis_valid", "changed", "label/correct"):
            assert 0.0 <= log[f"env/{key}"] <= 1.0 and math.isfinite(log[f"env/{key}"])
        assert log["env/turns"] > 1 and math.isfinite(log["loss"])
