"""Calibrated interactive RL (seed 004 #5): the scripted traveller that stands in for real users, the bundled
logged dialogues, the simulator-alignment examples and losses by hand, and held-out episodes played against the
scripted traveller."""

from __future__ import annotations

import json
import math

import pytest
import torch

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.core.errors import ConfigError
from rlpost.envs.base import build_env, held_out_episodes
from rlpost.envs.booking_data import DATA, build
from rlpost.envs.booking_dialogues import dialogues
from rlpost.envs.scripted_traveller import PHRASES, asked_slots, traveller_reply
from rlpost.tools.sim_alignment import batch_tensors, examples, revealed, target_nll

GOAL = {"city": "Lowmere", "day": "Wednesday", "class": "first"}
ROW = {"prompt": [{"role": "user", "content": "Hi, I need a train ticket."}], "goal_city": "Lowmere",
       "goal_day": "Wednesday", "goal_class": "first", "answer": "Lowmere, Wednesday, first"}  # fmt: skip


def test_the_traveller_answers_what_was_asked():
    assert asked_slots("Where would you like to go?") == ["city"]
    assert asked_slots("Where and when would you like to travel?") == ["city", "day"]
    assert asked_slots("First or second class?") == ["class"]
    assert asked_slots("Hello!") == []
    given: set[str] = set()
    reply = traveller_reply(GOAL, "Which class would you like?", given, "k", volunteer=0.0)
    assert "First" in reply and "Lowmere" not in reply and given == {"class"}
    # nothing recognised: the next slot not yet given (city), then day; all given: a closing line
    assert "Lowmere" in traveller_reply(GOAL, "Hello!", given, "k2", volunteer=0.0) and given == {"class", "city"}
    assert "Wednesday" in traveller_reply(GOAL, "Anything else?", given, "k3", volunteer=0.0)
    assert not any(v in traveller_reply(GOAL, "Anything else?", given, "k4") for v in GOAL.values())
    # volunteer=1: one more slot unasked; the wording is a function of the key
    more: set[str] = set()
    reply = traveller_reply(GOAL, "Where to?", more, "k5", volunteer=1.0)
    assert "Lowmere" in reply and "Wednesday" in reply and more == {"city", "day"}
    assert traveller_reply(GOAL, "Where to?", set(), "same") == traveller_reply(GOAL, "Where to?", set(), "same")
    assert len({traveller_reply(GOAL, "Where to?", set(), f"x{i}", 0.0) for i in range(40)}) == len(PHRASES["city"])


def test_bundled_dialogues_are_the_generated_ones_and_hold_no_held_out_goal():
    train, held_out = dialogues()
    assert [json.loads(x) for x in (DATA / "booking_dialogues.jsonl").read_text().splitlines()] == train
    assert [json.loads(x) for x in (DATA / "booking_dialogues_eval.jsonl").read_text().splitlines()] == held_out
    assert (len(train), len(held_out)) == (60, 20)
    eval_goals = {(r["goal_city"], r["goal_day"], r["goal_class"]) for r in build()[1]}
    for d in train + held_out:
        assert (d["goal_city"], d["goal_day"], d["goal_class"]) not in eval_goals
        assert d["turns"][-1] == {
            "role": "assistant",
            "content": f"BOOK: {d['goal_city']}, {d['goal_day']}, {d['goal_class']}",
        }
        assert [t["role"] for t in d["turns"][:2]] == ["user", "assistant"]


def test_alignment_examples_see_the_dialogue_from_the_users_side():
    d = {"goal_city": "Lowmere", "goal_day": "Wednesday", "goal_class": "first", "turns": [
        {"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Where to?"},
        {"role": "user", "content": "To Lowmere."}, {"role": "assistant", "content": "When?"},
        {"role": "user", "content": "Wednesday."}, {"role": "assistant", "content": "BOOK: Lowmere, Wednesday, first"}]}  # fmt: skip
    ex = examples(d, "Go to {goal_city} on {goal_day}")
    assert [e.target for e in ex] == ["To Lowmere.", "Wednesday."]  # the opening line is given, not simulated
    assert ex[0].messages == [{"role": "system", "content": "Go to Lowmere on Wednesday"},
                              {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Where to?"}]  # fmt: skip
    assert len(ex[1].messages) == 5 and ex[1].messages[-1] == {"role": "user", "content": "When?"}
    assert revealed("To LOWMERE, first class.", ex[0].goal) == {"goal_city", "goal_class"}
    assert revealed("Lowmerex", ex[0].goal) == frozenset()


def test_batches_label_only_the_target_and_the_nll_is_worked_by_hand():
    ids, mask, labels = batch_tensors([([5, 6], [7, 8]), ([5], [9])], pad=0)
    assert ids.tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]] and mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert labels.tolist() == [[-100, -100, 7, 8], [-100, 9, -100, -100]]

    class Fixed(torch.nn.Module):
        """Logits [B, L, V=4]: uniform, except that position 1 of row 0 puts log-odds 2 on token 7."""

        def forward(self, input_ids, attention_mask):
            logits = torch.zeros(*input_ids.shape, 10)
            logits[0, 1, 7] = 2.0
            return type("Out", (), {"logits": logits})()

    total, count = target_nll(Fixed(), ids, mask, labels)
    # predicted: row 0 token 7 at position 1 (p = e^2 / (e^2 + 9)), token 8 at 2 (p = 1/10); row 1 token 9 at 0 (1/10)
    expected = -math.log(math.e**2 / (math.e**2 + 9)) + 2 * math.log(10)
    assert count == 3 and float(total) == pytest.approx(expected, rel=1e-5)


def test_held_out_episodes_meet_the_scripted_traveller():
    env = build_env({"name": "simulated_user", "user_model": "tiny-random", "user_max_new_tokens": 3,
                     "held_out_user": "scripted"})  # fmt: skip
    with held_out_episodes(env):
        episode = env.fresh()  # the runner's per-episode copy keeps the flag
        episode.reset(ROW)
        reply = episode.step("Where would you like to go?").observations[0]["content"]
        assert "Lowmere" in reply  # the city it was asked for (maybe one more slot, volunteered)
        assert episode.step("BOOK: Lowmere, Wednesday, first").reward == 1.0
    assert not env.evaluating
    training, scripted = env.fresh(), env.fresh()
    scripted.evaluating = True
    for e in (training, scripted):
        e.reset(ROW)
    said = [e.step("Where to?").observations[0]["content"] for e in (training, scripted)]
    assert "Lowmere" in said[1] and said[0] != said[1]  # in training the tiny simulator answers, not the script
    with pytest.raises(ConfigError, match="held_out_user=scripted"):
        build_env({"name": "simulated_user", "held_out_user": "scripted", "slots": ["goal_city"]})
