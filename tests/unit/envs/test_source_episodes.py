"""The episodes of a data=mixture run (rlpost/envs/sources.py): each row plays its source's environment in one
batched loop (rlpost/envs/runner.py), each slot with its own limits; a source without one plays one turn."""

from __future__ import annotations

import pytest

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.data.mixture import SOURCE_COLUMN
from rlpost.envs.base import build_env
from rlpost.envs.runner import ChatRenderer, episode_fields, run_episodes
from rlpost.envs.sources import SourceEnvironment
from rlpost.models.loading import ModelConfig, load_tokenizer

from support.scripted import scripted


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(ModelConfig(name="tiny-random"))


def row(source: str, question: str, answer: str) -> dict:
    return {"prompt": [{"role": "user", "content": question}], "answer": answer, SOURCE_COLUMN: source}


def test_each_row_plays_its_sources_environment_in_one_loop(tok):
    env = SourceEnvironment({"arith": None, "calc": build_env({"name": "calculator", "max_turns": 3})})
    assert env.episodic == ["calc"] and env.active
    rows = [row("calc", "What is 12*7?", "84"), row("arith", "What is 2+2?", "4")]
    calls = []
    generate = scripted(tok, ["<calc>12*7</calc>", "It is 84."])

    def counted(prompt_ids, rows_):
        calls.append(list(rows_))  # which episodes share each turn's generation
        return generate(prompt_ids, rows_)

    calc, arith = run_episodes(env, rows, [0, 1], ChatRenderer(tok), counted, {tok.eos_token_id})
    assert calls == [[0, 1], [0]]  # turn 1 batched over both rows; the one-turn row is done after it
    assert (calc.reward, calc.ended, calc.tool_calls, calc.episode.turns) == (1.0, "done", 1, 2)
    assert calc.start[0]["role"] == "system" and "<calc>" in calc.start[0]["content"]  # the calculator's reset
    assert arith.start == rows[1]["prompt"] and arith.ended == "done" and arith.episode.turns == 1
    assert [m["role"] for m in arith.messages] == ["assistant"]  # the completion a run without episodes samples
    assert arith.episode.completion_mask == [1] * len(arith.episode.completion_ids)  # every token trained
    assert episode_fields([calc, arith])["rlpost_env_reward"] == [1.0, 0.0]  # the env term reads calc's only
    assert [env.plays(r) for r in rows] == [True, False]


def test_each_slot_keeps_its_own_limits(tok):
    env = SourceEnvironment({"a": build_env({"name": "calculator", "max_turns": 1}), "b": build_env({"name": "calculator", "max_turns": 3})})  # fmt: skip
    rows = [row("a", "What is 2*3?", "6"), row("b", "What is 2*3?", "6")]
    turns = ["<calc>2*3</calc>", "<calc>6</calc>", "6"]
    a, b = run_episodes(env, rows, [0, 0], ChatRenderer(tok), scripted(tok, turns), {tok.eos_token_id})
    assert (a.ended, a.episode.turns, a.reward) == ("max_turns", 1, 0.0)
    assert (b.ended, b.episode.turns, b.reward) == ("done", 3, 1.0)


def test_state_and_description_per_source():
    env = SourceEnvironment({"x": None, "y": build_env({"name": "calculator"})})
    assert env.describe() == "episodes by source: x=one turn, y=calculator"
    assert env.state_dict() == {}  # the calculator keeps no state
    with pytest.raises(ValueError, match="row of source 'z'"):
        env.fresh().reset(row("z", "?", "1"))
