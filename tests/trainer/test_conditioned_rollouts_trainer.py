"""The conditioned second rollouts (rlpost/rollouts/conditioned.py) through the real RLPostTrainer (tiny model,
2 steps): DITTO's feedback, RISE-RL's guidance and StructPO's stage-wise
revision are sampled under their conditioned prompt and trained under the original one
(tests/support/rollouts.py holds the harness)."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.losses.base import (
    GUIDED,
    KEEP,
    NUM_TOKENS,
    REWARDS,
    TRL_LOSS_BATCH_KEYS,
)

from support.judges import requests_for
from support.rollouts import check_trained_under_original_prompt, data_files, logged, train


def test_feedback_refine_trains_the_refined_rollout_under_the_original_prompt(tmp_path, generate_calls, server):
    # DITTO (seed 004 #16): a feedback model (an endpoint here) writes feedback on each specific rollout
    writer = ["algorithm.rollout.writer.backend=openai", f"algorithm.rollout.writer.base_url={server}/feedback/v1"]
    trainer = train(
        [*data_files(tmp_path), "algorithm/rollout=feedback_refine", *writer,
         "algorithm.rollout.reference_column=answer"],
        tmp_path,
    )  # fmt: skip
    assert check_trained_under_original_prompt(trainer, generate_calls) == 4  # k=2 slots x 2 groups
    batch = trainer.batches[-1]
    for request in trainer.run.algorithm.rollout.last.values():
        attempt = batch["texts"][request.source]
        assert request.prompt[-2] == {"role": "assistant", "content": attempt}
        # the feedback is about this rollout (it quotes it), cut at its first blank line
        assert request.note.startswith(f"Feedback on your response: Your response '{attempt[:30]}'")
        assert "Second paragraph" not in request.note
    asks = [e["prompt"] for e in requests_for("feedback")]
    assert len(asks) == 8  # 2 steps x 2 groups x k=2
    assert all("Task: " in a and "Response: " in a and "\n\nReference: " in a for a in asks)
    assert logged(trainer, "rlpost/rollout/conditioned_frac") == [0.5, 0.5]
    assert logged(trainer, "rlpost/rollout/feedback_refine/written_frac") == [1.0, 1.0]
    # each kind's mean reward before any rewrite: the hash reward is the only term (weight 1)
    reward = batch["terms"][:, 0]
    for kind in ("natural", "conditioned"):
        rows = torch.tensor([k == kind for k in batch["kinds"]])
        assert logged(trainer, f"rlpost/rollout/{kind}_reward")[-1] == pytest.approx(float(reward[rows].mean()))


def test_rubric_guidance_keeps_only_privileged_rollouts_that_beat_the_natural_mean(tmp_path, generate_calls):
    trainer = train(
        [
            *data_files(tmp_path),
            "algorithm/rollout=rubric_guidance",
            "+algorithm.rollout.rubric.judge.model={source: tiny_random, tiny_layers: 1}",
            "algorithm.rollout.miss_below=1.01",  # every criterion is missed: hints name them all
        ],
        tmp_path,
    )
    strategy = trainer.run.algorithm.rollout
    kept = logged(trainer, "rlpost/rollout/rubric_guidance/kept_frac")
    # "repeatedly missed" counts across training (repeat_min 2): the first group of step 1 is each criterion's
    # first miss (no hint), the second group its second; in step 2 both groups get hints
    assert logged(trainer, "rlpost/rollout/rubric_guidance/conditioned") == [2.0, 4.0]
    assert strategy.misses == {c.text: 4 for c in strategy._criteria(trainer.batches[-1]["rows"][0])}
    check_trained_under_original_prompt(trainer, generate_calls, in_group=False)
    aux = logged(trainer, "rlpost/rollout/rubric_guidance/aux_nll")  # the separate objective ran
    assert aux and all(math.isfinite(v) and v > 0 for v in aux)
    for request in strategy.last.values():
        assert "The final number in the response is equal to the reference answer." in request.note
    # the keep rule, recomputed from the judge on the last batch: kept rows beat their group's natural mean
    b = trainer.batches[-1]
    for slot in strategy.last:
        start = slot - slot % 4
        natural = [i for i in range(start, start + 4) if b["kinds"][i] == "natural"][:2]
        scores = strategy.scores(
            [b["rows"][i]["prompt"] for i in [*natural, slot]],
            [[{"role": "assistant", "content": b["texts"][i]}] for i in [*natural, slot]],
            [b["rows"][i] for i in [*natural, slot]],
        )
        weights = torch.tensor([1.0, 2.0])
        r = [(s * weights).sum().item() / 3 for s in scores]
        assert r[-1] > sum(r[:-1]) / 2
    assert all(0 <= v <= 1 for v in kept) and any(0 < v < 1 for v in kept)  # some kept, some dropped (seeded)
    assert b["keys"] - TRL_LOSS_BATCH_KEYS == {KEEP, REWARDS, NUM_TOKENS, GUIDED}  # only declared keys were added


LENGTH = "reward.terms=[{name: length, weight: 1.0, params: {target: 6, unit: words}}]"  # varies by completion


def test_struct_refine_revises_the_weakest_draft_stage_by_stage_under_the_original_prompt(tmp_path, generate_calls):
    trainer = train(
        [
            *data_files(tmp_path),
            LENGTH,
            "algorithm/advantage=segments",
            "algorithm.advantage.local=[]",  # the length term is global (coherence) credit
            "algorithm/rollout=struct_refine",
            "algorithm.rollout.refine_per_group=1",
            "algorithm.rollout.keep=all",  # every revision joins: the improved rule is checked on its log
        ],
        tmp_path,
    )
    strategy = trainer.run.algorithm.rollout
    assert check_trained_under_original_prompt(trainer, generate_calls) == 2  # k=1 slot x 2 groups
    b, improved = trainer.batches[-1], []
    terms = b["terms"][:, 0].tolist()  # the length reward, as the trainer scored each row under x
    for slot, request in strategy.last.items():
        start = slot - slot % 4
        drafts = [start, start + 1, start + 2]  # the G - k natural drafts the strategy chose from
        assert request.source in drafts and terms[request.source] == min(terms[i] for i in drafts)  # the weakest
        assert "Keep its stages in this order, each opened by its marker: <think>, <answer>." in request.note
        assert request.prompt[-2] == {"role": "assistant", "content": b["texts"][request.source]}
        improved.append(terms[slot] > terms[request.source])
    # logged: the share of revisions whose reward under x beats their draft's
    assert logged(trainer, "rlpost/rollout/struct_refine/improved_frac")[-1] == sum(improved) / len(improved)
    assert all(-1.0 <= v <= 0.0 for v in logged(trainer, "rlpost/rollout/struct_refine/draft_reward"))


def test_struct_refine_keeps_only_revisions_that_beat_their_draft():
    from rlpost.rollouts.conditioned import Request
    from rlpost.rollouts.struct_refine import StructRefine

    strategy = StructRefine(StructRefine.Config(refine_per_group=1))
    nan = float("nan")
    strategy._draft = {0: 0.2, 4: nan, 8: 0.5, 12: -1.0}  # the drafts' rewards under x
    requests = [Request(range(s, s + 4), "p", s) for s in (0, 4, 8, 12)]
    strategy.rewards_under_x = lambda ctx, sources, completions: [0.3, 1.0, 0.5, nan]
    logs = {}
    ctx = type("Ctx", (), {"log": lambda self, k, v: logs.__setitem__(k, v)})()
    # 0.3 > 0.2 kept; an unscorable draft is never beaten; 0.5 = 0.5 is no improvement; NaN revision dropped
    assert strategy.keep(requests, type("Out", (), {"completions": [None] * 4})(), ctx, None) == [
        True,
        False,
        False,
        False,
    ]
    assert logs == {"struct_refine/improved_frac": 0.25}
