"""Each rollout strategy through the real RLPostTrainer (tiny model, 2 steps): the groups really
contain what the strategy promises, the rewards it sets reach the advantage, parameters move and
its metrics are logged. TRL's own ``_generate`` is wrapped to record what it was asked to sample
(tests/support/rollouts.py). The conditioned second rollouts: tests/trainer/test_conditioned_rollouts_trainer.py."""

from __future__ import annotations

import json
import math

import pytest

from rlpost.rewards.math_answer import gold_number
from rlpost.rollouts.draft_injection import is_correct

from support.rollouts import ROWS, data_files, logged, train, unpadded


# ---- forced_refusal (RC-GRPO, seed 000 #9) --------------------------------------------------
def test_forced_refusal_groups_of_unanswerable_prompts_hold_refusals_and_answerable_refusals_pay(tmp_path):
    trainer = train(
        [
            *data_files(tmp_path),
            "reward.terms=[{name: math_answer, weight: 1.0}]",
            "algorithm/rollout=forced_refusal",
            "algorithm.rollout.min_refusals=2",
            "algorithm.rollout.patterns=['[xzq]']",  # some random completions count as refusing
            "train.completions_per_step=16",  # all 4 prompts in every step
        ],
        tmp_path,
    )
    strategy = trainer.run.algorithm.rollout
    refusal_ids = trainer._tokenizer.encode("None", add_special_tokens=False) + [trainer.eos_token_ids[0]]
    forced = answerable_refusals = 0
    for b in trainer.batches:
        for start in range(0, 16, 4):
            group = range(start, start + 4)
            row = b["rows"][start]
            refused = [strategy.refuses(b["texts"][i]) for i in group]
            for i, r in zip(group, refused):
                if b["kinds"][i] == "forced_refusal":
                    forced += 1
                    assert row["unanswerable"] and b["texts"][i] == "None"
                    assert unpadded(b["completion_ids"][i], b["completion_mask"][i]) == refusal_ids
                if row["unanswerable"]:  # the strategy sets the reward: refusal right, anything else wrong
                    assert b["rewards"][i].item() == (1.0 if r else 0.0)
                else:  # reward terms stand; a refusal pays the over-refusal penalty 0.5
                    assert b["rewards"][i].item() == pytest.approx(b["terms"][i, 0].item() - 0.5 * r)
                    answerable_refusals += r
            if row["unanswerable"]:
                assert sum(refused) >= 2
                if not all(refused):  # the refusals carry the group's positive advantage
                    assert all(b["advantages"][i] > 0 for i in group if refused[group.index(i)])
            else:
                assert "forced_refusal" not in [b["kinds"][i] for i in group]
    assert forced > 0 and answerable_refusals > 0
    assert all(math.isfinite(v) for v in logged(trainer, "rlpost/forced_refusal/over_refusal_rate"))
    assert logged(trainer, "rlpost/rollout/forced_refusal/forced")[0] >= 1


# ---- generic_negative (CRPO, seed 004 #8) ---------------------------------------------------
def test_generic_negative_is_in_every_group_below_its_worst_natural_rollout(tmp_path):
    trainer = train(
        ["algorithm/rollout=generic_negative", "algorithm.rollout.responses=['Sure, happy to help.']"], tmp_path
    )
    for b in trainer.batches:
        for start in range(0, 8, 4):
            group = list(range(start, start + 4))
            assert [b["kinds"][i] for i in group] == ["natural"] * 3 + ["generic_negative"]
            last = group[-1]
            assert b["texts"][last] == "Sure, happy to help."
            assert b["scored"][1][last][0]["content"] == "Sure, happy to help."  # scored by the reward terms
            worst = min(b["rewards"][i].item() for i in group[:-1])
            assert b["rewards"][last].item() == pytest.approx(worst - 1.0)
            assert b["advantages"][last] < min(b["advantages"][i] for i in group[:-1])
    assert all(math.isfinite(v) for v in logged(trainer, "rlpost/generic_negative/reward_mean"))


# ---- draft_injection (seed 004 #19) ---------------------------------------------------------
@pytest.mark.parametrize("match", ["matched", "shuffled"])
def test_draft_injection_puts_the_drafts_into_the_learners_context(match, tmp_path):
    drafts = {r["question"]: f"DRAFT{n} says {n * 11}" for n, r in enumerate(ROWS)}
    path = tmp_path / "drafts.jsonl"
    path.write_text("".join(json.dumps({"question": q, "draft": d}) + "\n" for q, d in drafts.items()))
    trainer = train(
        [
            *data_files(tmp_path),
            "algorithm/rollout=draft_injection",
            f"algorithm.rollout.path={path}",
            f"algorithm.rollout.match={match}",
        ],
        tmp_path,
    )
    tok = trainer._tokenizer
    for b in trainer.batches:
        for i, row in enumerate(b["rows"]):
            context = tok.decode(unpadded(b["prompt_ids"][i], b["prompt_mask"][i]))
            assert row["question"] in context
            found = [q for q, d in drafts.items() if d in context]
            assert len(found) == 1, context
            assert (found[0] == row["question"]) == (match == "matched"), context
            assert b["kinds"][i] == f"draft_{match}"
    assert logged(trainer, "rlpost/rollout/draft_injection/matched_frac") == [1.0 if match == "matched" else 0.0] * 2


def test_draft_injection_from_a_draft_model_rotates_its_drafts(tmp_path, generate_calls):
    trainer = train(
        [
            "algorithm/rollout=draft_injection",
            "algorithm.rollout.source=model",
            "+algorithm.rollout.model={source: tiny_random, tiny_layers: 1}",
            "algorithm.rollout.draft_max_tokens=6",
            "algorithm.rollout.template='{prompt} DRAFT[{draft}]'",
        ],
        tmp_path,
    )
    strategy = trainer.run.algorithm.rollout
    prompts, _ = generate_calls[-1]  # the last training batch: what TRL sampled under
    questions = [json.loads(json.dumps(p))[-1]["content"] for p in prompts]
    originals = [r["prompt"][-1]["content"] for r in trainer.batches[-1]["rows"]]
    for i, (question, original) in enumerate(zip(questions, originals)):
        draft, written_for = strategy.last[i]
        assert question == f"{original} DRAFT[{draft}]"
        assert written_for != original  # shuffled: written for the other prompt of the step
        assert written_for in originals


@pytest.mark.parametrize("correctness", ["wrong", "correct"])
def test_draft_model_drafts_are_mismatched_and_of_the_asked_correctness(correctness, tmp_path, generate_calls):
    # The tiny random draft model writes random tokens, never the answer: "wrong" keeps them (judged against
    # each draft's own problem), "correct" must repair every one of them (after its redraws).
    trainer = train(
        [
            "algorithm/rollout=draft_injection",
            "algorithm.rollout.source=model",
            "+algorithm.rollout.model={source: tiny_random, tiny_layers: 1}",
            "algorithm.rollout.draft_max_tokens=6",
            f"algorithm.rollout.correctness={correctness}",
            "algorithm.rollout.redraws=1",
        ],
        tmp_path,
    )
    strategy = trainer.run.algorithm.rollout
    rows = trainer.batches[-1]["rows"]
    golds = {r["prompt"][-1]["content"]: gold_number(r["answer"]) for r in rows}
    for i, row in enumerate(rows):
        draft, written_for = strategy.last[i]
        assert written_for != row["prompt"][-1]["content"]  # mismatched: another problem's draft
        assert is_correct(draft, golds[written_for]) is (correctness == "correct")
    repaired = logged(trainer, "rlpost/rollout/draft_injection/repaired_frac")
    assert repaired == ([1.0] * 2 if correctness == "correct" else [0.0] * 2)


# ---- conditioned second rollout under the original prompt (000 #6, #12, #19; 004 #16) ---------
