"""The rollout strategies' trainer-test harness: a Recorder trainer that keeps every generation batch, a
fixture recording what TRL was asked to sample, small jsonl data, and the checks shared by the strategies
(tests/trainer/test_rollouts_trainer.py, tests/trainer/test_conditioned_rollouts_trainer.py)."""

from __future__ import annotations

import json

import pytest
import torch
from trl import GRPOTrainer

from rlpost.core.chat import completion_text
from rlpost.data.sources import load_datasets
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.trainer import RLPostTrainer

from support.trainer import grpo_args, make_run, step_logs

ROWS = [
    {"question": "What is 3 + 4?", "answer": "7", "unanswerable": False, "tip": "Be brief."},
    {"question": "What is 5 divided by 0?", "answer": "None", "unanswerable": True, "tip": "Say so."},
    {"question": "What is 2 * 6?", "answer": "12", "unanswerable": False, "tip": "Only the number."},
    {"question": "What is 9 + x?", "answer": "None", "unanswerable": True, "tip": "No guessing."},
]


class Recorder(RLPostTrainer):
    """The real trainer; keeps each generation batch's rows, kinds, outputs and what the rewards saw."""

    def __init__(self, *args, **kwargs):
        self.batches: list[dict] = []
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._scored = (list(prompts), list(completions))
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.batches.append(
                {
                    "rows": list(inputs),
                    "kinds": None if self.batch.kinds is None else list(self.batch.kinds),  # None: episodes
                    "texts": [completion_text(c) for c in self.batch.completions],
                    "scored": self._scored,
                    "terms": self.batch.reward_terms.clone(),
                    "rewards": out["rlpost_rewards"].clone(),
                    "advantages": out["advantages"].clone(),
                    "prompt_ids": out["prompt_ids"].clone(),
                    "prompt_mask": out["prompt_mask"].clone(),
                    "completion_ids": out["completion_ids"].clone(),
                    "completion_mask": out["completion_mask"].clone(),
                    "keys": set(out),  # the loss batch's keys: TRL's and the declared ones (rlpost/losses/base.py)
                }
            )
        return out


@pytest.fixture
def generate_calls(monkeypatch):
    """Every call of TRL's GRPOTrainer._generate: (prompts, completion texts)."""
    calls = []
    real = GRPOTrainer._generate

    def recording(self, prompts):
        out = real(self, prompts)
        calls.append((prompts, [completion_text(c) for c in out[3]]))
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate", recording)
    return calls


def data_files(tmp_path, rows=ROWS):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "eval.jsonl").write_text(json.dumps({**rows[0], "question": "What is 1 + 1?", "answer": "2"}) + "\n")
    return [
        "data=jsonl",
        f"data.path={tmp_path / 'train.jsonl'}",
        f"data.eval_split={tmp_path / 'eval.jsonl'}",
        "data.eval_size=1",
        "eval.size=1",
    ]


def train(overrides: list[str], tmp_path) -> Recorder:
    run = make_run(["train.steps=2", *overrides])
    train_set, _ = load_datasets(run.data)
    trainer = Recorder(
        model=load_model(run.model),
        args=grpo_args(run, tmp_path / "out"),
        train_dataset=train_set,
        processing_class=load_tokenizer(run.model),
        run=run,
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    moved = any(not torch.equal(b, p.detach()) for b, p in zip(before, trainer.model.parameters()))
    assert moved, "no parameter moved"
    assert len(trainer.batches) == 2
    return trainer


def logged(trainer, key: str) -> list[float]:
    values = [log[key] for log in step_logs(trainer) if key in log]
    assert values, f"{key} not logged; logged: {sorted(step_logs(trainer)[-1])}"
    return values


def unpadded(ids: torch.Tensor, mask: torch.Tensor) -> list[int]:
    return ids[mask.bool()].tolist()


def original_prompt_ids(trainer, prompt) -> list[int]:
    return list(trainer._tokenize_prompts([prompt])[0][0])


def check_trained_under_original_prompt(trainer, generate_calls, min_rows: int = 1, in_group: bool = True) -> int:
    """Rows filled by a conditioned rollout: sampled under the conditioned prompt, scored and trained under x
    (``in_group=False``: out of the GRPO group, NaN reward and zero advantage: RISE-RL's auxiliary objective)."""
    strategy = trainer.run.algorithm.rollout
    sampled = {}
    for prompts, texts in generate_calls:
        for p, t in zip(prompts, texts):
            sampled.setdefault(json.dumps(p), []).append(t)
    b = trainer.batches[-1]
    assert strategy.last, "no conditioned rollout joined the last batch"
    for slot, request in strategy.last.items():
        x = b["rows"][slot]["prompt"]
        assert b["kinds"][slot] == "conditioned"
        assert request.prompt != x and request.note
        assert b["texts"][slot] in sampled[json.dumps(request.prompt)]  # sampled under the conditioned prompt
        assert unpadded(b["prompt_ids"][slot], b["prompt_mask"][slot]) == original_prompt_ids(trainer, x)
        assert b["scored"][0][slot] == x  # scored under x too
        assert b["scored"][1][slot][0]["content"] == b["texts"][slot]
        if in_group:
            assert torch.isfinite(b["rewards"][slot]) and torch.isfinite(b["advantages"][slot]).all()
        else:
            assert torch.isnan(b["rewards"][slot]) and (b["advantages"][slot] == 0).all()
    assert len(strategy.last) >= min_rows
    return len(strategy.last)
