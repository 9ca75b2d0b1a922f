"""experience_buffer (prompter policies, seed 004 #21) through the real RLPostTrainer: the tiny random model
instructs a tiny random frozen worker (data/env=frozen_worker), a critic endpoint writes the critiques, 2 steps."""

from __future__ import annotations

import math

import torch
from test_env_trainer import ends_turns_soon

from rlpost.data.sources import load_datasets
from rlpost.envs.frozen_worker import FrozenWorker
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.rollouts.experience_buffer import HEADER, ExperienceBuffer
from rlpost.runs.state import STATE_FILE

from support.judges import requests_for
from support.rollouts import ROWS, Recorder, data_files, logged
from support.trainer import grpo_args, make_run, step_logs

# the worker never answers right (random weights): a hash term gives the group rewards a spread to learn from
TERMS = (
    "reward.terms=[{name: env, weight: 1.0, params: {}}, "
    "{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"
)
OVERRIDES = [
    "data/env=frozen_worker",
    "data.env.worker_model=tiny-random",
    "data.env.worker_max_new_tokens=4",
    TERMS,
    "algorithm/rollout=experience_buffer",
    "algorithm.rollout.critic.backend=openai",  # the fake endpoint (tests/support/judges.py); a random model writes
]  # nothing readable, and the local critic's path is the writer's (tests of feedback_refine)
STEPS = ["train.steps=2", "train.save_steps=2"]


def test_the_buffer_fills_with_critiques_and_conditions_the_second_step(tmp_path, monkeypatch, server):
    starts, tasks = [], []  # every episode's first messages; the task each worker call read
    real_reset, real_carry = FrozenWorker.reset, FrozenWorker.carry_out

    def reset(self, row, seed=0):
        starts.append(real_reset(self, row, seed))
        return starts[-1]

    def carry_out(self, instruction):
        tasks.append(self.question)
        return real_carry(self, instruction)

    monkeypatch.setattr(FrozenWorker, "reset", reset)  # recorded, then the real environment runs
    monkeypatch.setattr(FrozenWorker, "carry_out", carry_out)
    critic = f"algorithm.rollout.critic.base_url={server}/critic/v1"
    run = make_run([*data_files(tmp_path), *OVERRIDES, critic, *STEPS])
    train_set, _ = load_datasets(run.data)
    tok, model = load_tokenizer(run.model), load_model(run.model)
    ends_turns_soon(model, tok)
    trainer = Recorder(model=model, args=grpo_args(run, tmp_path / "out"), train_dataset=train_set,
                       processing_class=tok, run=run)  # fmt: skip
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, trainer.model.parameters())), "nothing moved"
    strategy = trainer.run.algorithm.rollout
    # step 0: the buffer is empty, every rollout plain; then 2 groups x (best, worst) = 4 entries per step
    assert logged(trainer, "rlpost/experience_buffer/buffer_size") == [4.0, 8.0]
    assert logged(trainer, "rlpost/rollout/experience_buffer/conditioned") == [0.0, 4.0]  # k=2 x 2 groups at step 1
    first, second = trainer.batches
    assert first["kinds"] == ["natural"] * 8
    assert second["kinds"] == (["natural"] * 2 + ["experience"] * 2) * 2
    # amortized: a buffer-conditioned rollout is trained under its group's plain prompt ids
    for g in (0, 4):
        for i in (g + 2, g + 3):
            assert torch.equal(second["prompt_ids"][i], second["prompt_ids"][g])
    # ... and was sampled with the buffer in its prompt (the episode started from the extended row); the worker
    # always read the plain task, never the buffer
    assert len([s for s in starts if HEADER in s[-1]["content"]]) == 4  # step 1's k=2 x 2 groups
    assert len(tasks) > 0 and all(t in {r["question"] for r in ROWS} for t in tasks)
    for best, worst in strategy.shown:
        assert len(best) == 1 and len(worst) == 1 and best[0].reward >= worst[0].reward
    assert all(e.task in {r["question"] for r in ROWS} for e in strategy.buffer.entries[""])
    assert all(e.critique == "no" for e in strategy.buffer.entries[""])  # the endpoint's reply, one per entry
    asks = [e["prompt"] for e in requests_for("critic")]
    assert len(asks) == 8 and all("\n\nInstruction: " in a and "\n\nReward: " in a for a in asks)
    logs = step_logs(trainer)
    assert all(math.isfinite(log["loss"]) for log in logs)
    assert math.isfinite(logs[1]["rlpost/experience_buffer/conditioned_reward_mean"])
    assert math.isfinite(logs[1]["rlpost/experience_buffer/plain_reward_mean"])
    assert all(v > 0 for v in logged(trainer, "rlpost/experience_buffer/critique_chars_mean"))
    # checkpointed and restored: a fresh strategy loads the same 8 entries
    state = torch.load(tmp_path / "out" / "checkpoint-2" / STATE_FILE, weights_only=True)["algorithm.rollout"]
    fresh = ExperienceBuffer(strategy.cfg)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == strategy.state_dict() and len(fresh.buffer) == 8 and fresh.step == 2
