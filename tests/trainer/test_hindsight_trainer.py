"""HindSearch (seed 000 #12, rlpost/rollouts/hindsight_critique.py) through the real RLPostTrainer (tiny model):
every rollout is sampled by the student under x and stays a GRPO row; a failed one gets a critique, and the
distillation term's teacher log-probs are the policy's on that rollout's own tokens after x plus the critique."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlpost.data.sources import load_datasets
from rlpost.losses.base import HINDSIGHT_TEACHER_LOGPS, HINDSIGHT_WEIGHT, KEEP, NUM_TOKENS, REWARDS, TRL_LOSS_BATCH_KEYS
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.rollouts.base import user_text
from rlpost.rollouts.hindsight_critique import KIND, teacher_context

from support.judges import requests_for
from support.rollouts import ROWS, Recorder, data_files, logged, original_prompt_ids, unpadded
from support.trainer import grpo_args, make_run


def hand_logps(model, prompt: list[int], completion: list[int]) -> list[float]:
    """log pi(y_t | prompt, y_<t) for each token of ``completion``: one forward on prompt + completion."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logps = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)  # position p predicts token p + 1
    return logps[torch.arange(len(completion)), torch.tensor(completion)].tolist()


@pytest.mark.parametrize("sees_gold", [True, False])
def test_the_failed_rollouts_own_tokens_are_distilled_from_the_critique_reading_policy(
    tmp_path, generate_calls, server, sees_gold
):
    writer = ["algorithm.rollout.writer.backend=openai", f"algorithm.rollout.writer.base_url={server}/feedback/v1"]
    run = make_run(
        [*data_files(tmp_path), "train.steps=2", "algorithm/rollout=hindsight_critique", *writer,
         "eval.correct_term=callable", "algorithm.rollout.fail_below=1.01",  # the hash reward is < 1: all failed
         f"algorithm.rollout.judge_sees_gold={str(sees_gold).lower()}"]
    )  # fmt: skip
    train_set, _ = load_datasets(run.data)
    trainer = Recorder(model=load_model(run.model), args=grpo_args(run, tmp_path / "out"), train_dataset=train_set,
                       processing_class=load_tokenizer(run.model), run=run)  # fmt: skip
    g, strategy = trainer.num_generations, trainer.run.algorithm.rollout
    inputs = [dict(train_set[i // g]) for i in range(2 * g)]  # two groups
    trainer.model.train()
    out = trainer._generate_and_score_completions(inputs)
    # sampled once, by the student under x only: no second rollout under a critique-conditioned prompt
    assert [p for p, _ in generate_calls] == [[r["prompt"] for r in inputs]]
    k = run.algorithm.rollout.cfg.critiques_per_group  # 2: the first two failed rollouts of each group
    assert trainer.batch.kinds == ([KIND] * k + ["natural"] * (g - k)) * 2
    texts = generate_calls[0][1]
    for i, note in strategy.notes.items():
        # the critique is about this very rollout (the writer quotes it), and the rollout keeps its GRPO reward
        assert (
            note
            == f"Hindsight from a reviewer who saw an attempt at this question fail: Your response '{texts[i][:30]}' does not state the final answer."
        )  # noqa: E501
        assert torch.isfinite(out[REWARDS][i]) and out[HINDSIGHT_WEIGHT][i] == 1.0
        # the teacher context c: x's user turn with the critique appended, rendered as the trainer renders x
        x = inputs[i]["prompt"]
        c = teacher_context(x, note)
        assert user_text(c) == f"{user_text(x)}\n\n{note}"
        assert strategy.teacher_prompts[i] == original_prompt_ids(trainer, c)
        # the teacher's log-probs are on the student's own tokens y (sampled under x), by hand:
        # teacher_t = log pi(y_t | c, y_<t), one forward on c + y
        y = unpadded(out["completion_ids"][i], out["completion_mask"][i])
        n = len(y)
        assert out[HINDSIGHT_TEACHER_LOGPS][i][:n].tolist() == pytest.approx(
            hand_logps(trainer.model, strategy.teacher_prompts[i], y), abs=1e-4
        )
        assert unpadded(out["prompt_ids"][i], out["prompt_mask"][i]) == original_prompt_ids(
            trainer, x
        )  # trained under x
    for i, kind in enumerate(trainer.batch.kinds):
        if kind == "natural":
            assert out[HINDSIGHT_WEIGHT][i] == 0.0 and out[HINDSIGHT_TEACHER_LOGPS][i].abs().sum() == 0
    asks = [e["prompt"] for e in requests_for("feedback")]
    assert len(asks) == 2 * k and all("Response: " in a for a in asks)
    golds = {f"Reference: {r['answer']}" for r in ROWS}
    assert all(any(a.endswith(gold) for gold in golds) == sees_gold for a in asks)

    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, trainer.model.parameters()))
    assert logged(trainer, "rlpost/rollout/hindsight_critique/failed_frac") == [1.0, 1.0]
    assert logged(trainer, "rlpost/rollout/critiqued_frac") == [k / g, k / g]
    assert logged(trainer, "active/rollout/hindsight_critique") == [k / g, k / g]  # the rows carrying the term
    assert all(v > 0 for v in logged(trainer, "rlpost/rollout/hindsight_critique/critique_chars_mean"))
    assert all(math.isfinite(v) for v in logged(trainer, "rlpost/rollout/hindsight_critique/opd_kl"))
    assert all(v < 0 for v in logged(trainer, "rlpost/rollout/hindsight_critique/teacher_logp"))
    # the trainer added exactly the declared keys of what ran: its own and the strategy's score_rollouts ones
    added = trainer.batches[-1]["keys"] - TRL_LOSS_BATCH_KEYS
    assert added == {KEEP, REWARDS, NUM_TOKENS, HINDSIGHT_WEIGHT, HINDSIGHT_TEACHER_LOGPS}
    assert json.dumps(strategy.describe())  # a plain string for rlpost show
