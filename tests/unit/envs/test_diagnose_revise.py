"""data/env=diagnose_revise (LA-RL, seed 000 #19): the diagnosis parser and the episode reward by hand, scripted
predict -> diagnose -> revise episodes through the real runner and chat template, the logged per-episode means
(training and held out), the refusals, and the recipe's composition."""

from __future__ import annotations

import itertools

import pytest

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.envs.base import build_env
from rlpost.envs.diagnose_revise import DiagnoseReviseConfig, episode_reward, normalize, parse_diagnosis
from rlpost.envs.runner import ChatRenderer, episode_metrics, run_episodes
from rlpost.evaluation.evaluate import episode_eval_metrics
from rlpost.models.loading import ModelConfig, load_tokenizer

LABELS = ["correct", "wrong_operation", "arithmetic_slip", "sign_error", "missing_answer"]
ROW = {"prompt": [{"role": "user", "content": "Calculate 3 + 4.\nGive only the final answer."}], "answer": "7"}


def test_the_diagnosis_parser_by_hand():
    def parse(text):
        return parse_diagnosis(text, LABELS, "correct")

    assert normalize(" Arithmetic slip.") == "arithmetic_slip" and normalize("sign-error") == "sign_error"
    # read after the last "DIAGNOSIS:"; items split on , ; "and" and new lines; spaces/hyphens -> _
    assert parse("DIAGNOSIS: arithmetic slip, sign-error.") == (["arithmetic_slip", "sign_error"], True)
    assert parse("I think so.\ndiagnosis: Correct") == (["correct"], True)
    assert parse("wrong operation and arithmetic_slip") == (["wrong_operation", "arithmetic_slip"], True)  # no prefix
    assert parse("DIAGNOSIS: sign_error; sign error") == (["sign_error"], True)  # named once
    # invalid: an unknown item (the known one is still named), nothing, free text, "correct" beside an error
    assert parse("DIAGNOSIS: wrong operation; foo") == (["wrong_operation"], False)
    assert parse("DIAGNOSIS:") == ([], False) and parse("") == ([], False)
    assert parse("The answer is right") == ([], False)
    assert parse("DIAGNOSIS: correct, arithmetic slip") == (["correct", "arithmetic_slip"], False)
    # without an ok_label the same pair is a valid diagnosis
    assert parse_diagnosis("correct, arithmetic slip", LABELS, None) == (["correct", "arithmetic_slip"], True)


def test_the_episode_reward_by_hand():
    cfg = DiagnoseReviseConfig()  # w_final 1.0, w_first 0.5, w_format 0.2
    assert episode_reward(True, True, True, cfg) == pytest.approx(1.7)  # 1.0 + 0.5 + 0.2
    assert episode_reward(False, True, True, cfg) == pytest.approx(1.2)  # fixed by the revision: 1.0 + 0.2
    assert episode_reward(True, False, True, cfg) == pytest.approx(0.7)  # broken by the revision: 0.5 + 0.2
    assert episode_reward(True, False, False, cfg) == pytest.approx(0.5)
    assert episode_reward(False, False, False, cfg) == 0.0
    other = DiagnoseReviseConfig(w_final=2.0, w_first=0.0, w_format=1.0)
    assert episode_reward(True, True, False, other) == pytest.approx(2.0)  # 2 x 1 + 0 x 1 + 1 x 0
    # w_first + w_format < w_final: R >= w_final exactly when the final answer is right (eval/accuracy's threshold)
    for first, final, fmt in itertools.product([False, True], repeat=3):
        assert (episode_reward(first, final, fmt, cfg) >= cfg.w_final) == final


def scripted(tok, turns_per_row):
    """A policy that writes turns_per_row[row][t] at its t-th turn (t counted from the assistant headers)."""
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def policy(prompt_ids, rows):
        out = []
        for ids, row in zip(prompt_ids, rows):
            t = sum(ids[i : i + len(header)] == header for i in range(len(ids))) - 1
            out.append(tok.encode(turns_per_row[row][t], add_special_tokens=False) + [tok.eos_token_id])
        return out, None

    return policy


def test_scripted_episodes_are_scored_and_logged():
    tok = load_tokenizer(ModelConfig(name="tiny-random"))
    env = build_env({"name": "diagnose_revise"})
    turns = [
        ["7", "DIAGNOSIS: correct", "7"],  # right, valid, right, unchanged: 0.5 + 1.0 + 0.2 = 1.7
        ["12", "DIAGNOSIS: wrong operation", "The answer is 7."],  # fixed: 1.0 + 0.2 = 1.2, changed
        ["7", "It looks fine to me", "8"],  # right first, invalid diagnosis, broken: 0.5, changed
        ["no idea", "DIAGNOSIS: missing answer", "7"],  # no first number: format invalid; final right: 1.0
    ]
    results = run_episodes(env, [ROW] * 4, [0] * 4, ChatRenderer(tok), scripted(tok, turns), {tok.eos_token_id})
    assert [r.reward for r in results] == pytest.approx([1.7, 1.2, 0.5, 1.0])
    assert all(r.ended == "done" and r.episode.turns == 3 for r in results)
    # the conversation: the row's prompt, then the diagnose instruction (listing the labels), then the revise one
    assert results[0].start == ROW["prompt"]
    roles = [m["role"] for m in results[0].messages]
    assert roles == ["assistant", "user", "assistant", "user", "assistant"]
    assert "Which of these labels apply: correct, wrong_operation, arithmetic_slip" in results[0].messages[1]["content"]
    assert results[0].messages[3]["content"].startswith("Now revise your answer")
    # every policy turn is trained (three spans), the instructions are context
    assert all(len(r.episode.spans) == 3 and 0 in r.episode.completion_mask for r in results)
    sums = episode_metrics(results, env)
    assert sums["first_correct"] == 2 and sums["final_correct"] == 3 and sums["format_valid"] == 2
    # 7 -> 7 is the only unchanged answer ("no idea" -> 7 counts as changed)
    assert sums["diagnosis_valid"] == 3 and sums["changed"] == 3
    assert (sums["label/correct"], sums["label/wrong_operation"], sums["label/missing_answer"]) == (1, 1, 1)
    assert sums["label/sign_error"] == 0
    held_out = episode_eval_metrics(results, env)
    assert held_out["eval/env/first_correct"] == 0.5 and held_out["eval/env/final_correct"] == 0.75
    assert held_out["eval/env/label/correct"] == 0.25 and held_out["eval/env/turns"] == 3


def test_a_truncated_turn_ends_the_episode_with_what_it_earned():
    tok = load_tokenizer(ModelConfig(name="tiny-random"))
    env = build_env({"name": "diagnose_revise"})

    def policy(prompt_ids, rows):  # a right answer, then a diagnosis cut at the cap (no end-of-turn token)
        first = len(prompt_ids[0]) == len(ChatRenderer(tok).prompt_ids(ROW["prompt"]))
        return [tok.encode("7", add_special_tokens=False) + ([tok.eos_token_id] if first else [])], None

    (r,) = run_episodes(env, [ROW], [0], ChatRenderer(tok), policy, {tok.eos_token_id})
    assert (r.ended, r.episode.turns, r.reward) == ("truncated", 2, 0.5)  # w_first only
    assert episode_metrics([r], env)["final_correct"] == 0


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"ok_label": "fine"}, "ok_label='fine' is not one of labels"),
        ({"labels": ["slip", "Slip"]}, "labels must be distinct"),
        ({"labels": []}, "labels must be distinct"),
        ({"diagnose": "What went wrong?"}, "diagnose must contain"),
        ({"max_turns": 2}, "max_turns"),
        ({"w_first": -0.5}, "w_first"),
    ],
)
def test_bad_settings_are_refused(override, match):
    with pytest.raises(ConfigError, match=match):
        build_env({"name": "diagnose_revise", **override})


def test_the_recipe_composes_the_episode_with_the_env_reward():
    run = build_run(compose(["recipe=la_rl"]))
    assert type(run.env).registry_name == "diagnose_revise" and run.reward.names == ["env"]
    assert run.env.metric_names()[:2] == ["first_correct", "final_correct"]
    with pytest.raises(ConfigError, match="reward term env"):
        build_run(compose(["data/env=diagnose_revise"]))


def test_the_environment_cites_its_seed():
    from rlpost.envs.base import ENVS
    from rlpost.tools.listing import seed_reference

    assert seed_reference(ENVS.get("diagnose_revise")) == "seed 000 #19"
