"""data/env=simulated_user: a frozen model plays a user with a hidden goal; the policy asks, then books."""

from __future__ import annotations

import json

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.envs.base import build_env
from rlpost.envs.booking_data import DATA, build
from rlpost.envs.runner import ChatRenderer, run_episodes
from rlpost.models.loading import ModelConfig, load_tokenizer

ROW = {"prompt": [{"role": "user", "content": "Hi, I need a train ticket."}], "goal_city": "Lowmere",
       "goal_day": "Wednesday", "goal_class": "first", "answer": "Lowmere, Wednesday, first"}  # fmt: skip
TINY = {"name": "simulated_user", "user_model": "tiny-random", "user_max_new_tokens": 5}


def test_the_policy_asks_the_simulator_answers_and_the_booking_is_scored():
    tok = load_tokenizer(ModelConfig(name="tiny-random"))
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def scripted(turns):
        def policy(prompt_ids, rows):
            taken = [sum(ids[i : i + len(header)] == header for i in range(len(ids))) - 1 for ids in prompt_ids]
            return [tok.encode(turns[t], add_special_tokens=False) + [tok.eos_token_id] for t in taken], None

        return policy

    env = build_env(TINY)
    right = ["Where to, and when?", "Which class?", "BOOK: lowmere, Wednesday, First class"]
    (r,) = run_episodes(env, [ROW], [0], ChatRenderer(tok), scripted(right), {tok.eos_token_id})
    assert [m["role"] for m in r.messages] == ["assistant", "user", "assistant", "user", "assistant"]
    assert all(m["content"] for m in r.messages if m["role"] == "user")  # the simulator's real replies
    assert (r.reward, r.ended, r.episode.turns) == (1.0, "done", 3)
    assert "Hi, I need a train ticket." in r.start[-1]["content"] and "Lowmere" not in json.dumps(r.start)  # hidden
    wrong = ["BOOK: Lowmere, Thursday, first"]
    (w,) = run_episodes(env, [ROW], [0], ChatRenderer(tok), scripted(wrong), {tok.eos_token_id})
    assert w.reward == 0.0 and w.infos[0]["slots_right"] == 2
    partial = build_env({**TINY, "reward": "fraction"})
    (p,) = run_episodes(partial, [ROW], [0], ChatRenderer(tok), scripted(wrong), {tok.eos_token_id})
    assert abs(p.reward - 2 / 3) < 1e-9
    never = ["Hello?"] * 6
    (n,) = run_episodes(build_env({**TINY, "max_turns": 2}), [ROW], [0], ChatRenderer(tok), scripted(never),
                        {tok.eos_token_id})  # fmt: skip
    assert (n.reward, n.ended) == (0.0, "max_turns")


def test_the_simulator_sees_its_goal_and_the_dialogue_from_its_side():
    env = build_env(TINY)
    env.reset(ROW)
    assert env.persona.startswith("You are a traveller") and "first class ticket to Lowmere on Wednesday" in env.persona
    env.step("Where to?")
    assert [who for who, _ in env.dialogue] == ["user", "assistant", "user"]


def test_bundled_rows_hide_the_goal_and_held_out_goals_are_new():
    train, held_out = build()
    assert [json.loads(x) for x in (DATA / "booking.jsonl").read_text().splitlines()] == train
    assert [json.loads(x) for x in (DATA / "booking_eval.jsonl").read_text().splitlines()] == held_out
    assert (len(train), len(held_out)) == (100, 40)
    goals = lambda rows: {(r["goal_city"], r["goal_day"], r["goal_class"]) for r in rows}  # noqa: E731
    assert not goals(train) & goals(held_out)
    assert all(r["goal_city"] not in r["question"] and r["goal_day"] not in r["question"] for r in train + held_out)
