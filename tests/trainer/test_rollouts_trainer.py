"""Each rollout strategy through the real RLPostTrainer (tiny model, 2 steps): the groups really
contain what the strategy promises, the rewards it sets reach the advantage, parameters move and
its metrics are logged. TRL's own ``_generate`` is wrapped to record what it was asked to sample."""

from __future__ import annotations

import json
import math

import pytest
import torch
from support_judges import requests_for
from trl import GRPOTrainer

from rlpost.data import load_datasets
from rlpost.models import load_model, load_tokenizer
from rlpost.rewards.base import completion_text
from rlpost.rewards.math_answer import gold_number
from rlpost.rollouts.draft_injection import is_correct
from rlpost.trainer import RLPostTrainer

from trainer_utils import grpo_args, make_run, step_logs

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
                    "kinds": list(self.batch.kinds),
                    "texts": [completion_text(c) for c in self.batch.completions],
                    "scored": self._scored,
                    "terms": self.batch.reward_terms.clone(),
                    "rewards": out["rlpost_rewards"].clone(),
                    "advantages": out["advantages"].clone(),
                    "prompt_ids": out["prompt_ids"].clone(),
                    "prompt_mask": out["prompt_mask"].clone(),
                    "completion_ids": out["completion_ids"].clone(),
                    "completion_mask": out["completion_mask"].clone(),
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


def test_hindsight_critique_conditions_failed_rollouts_on_the_gold_answer(tmp_path, generate_calls):
    trainer = train(
        [
            *data_files(tmp_path),
            "algorithm/rollout=hindsight_critique",
            "+algorithm.rollout.judge.model={source: tiny_random, tiny_layers: 1}",
            "algorithm.rollout.fail_below=1.01",  # the random judge is never sure: every rollout failed
        ],
        tmp_path,
    )
    check_trained_under_original_prompt(trainer, generate_calls, min_rows=4)
    for slot, request in trainer.run.algorithm.rollout.last.items():
        assert f"The correct final answer is {trainer.batches[-1]['rows'][slot]['answer']}." in request.note
    assert all(0 < v < 1 for v in logged(trainer, "rlpost/rollout/hindsight_critique/judge_score_mean"))


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


def test_reflect_revise_diagnoses_then_trains_the_revision_under_the_original_prompt(tmp_path, generate_calls):
    trainer = train([*data_files(tmp_path), "algorithm/rollout=reflect_revise"], tmp_path)
    check_trained_under_original_prompt(trainer, generate_calls, min_rows=4)
    diagnose = [p for prompts, _ in generate_calls for p in prompts if "Which of these labels apply" in json.dumps(p)]
    assert len(diagnose) == 8  # 2 steps x 2 groups x k=2
    for request in trainer.run.algorithm.rollout.last.values():
        assert request.note.startswith("Diagnosis of your response: ")


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
