"""experience_buffer (seed 004 #21): the buffer's FIFO eviction and contrastive selection, the prompt it writes,
which rollouts enter it, and its critiques (a fake OpenAI-compatible critic: tests/support/judges.py)."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.core.schema import build_config
from rlpost.rollouts.experience_buffer import (
    FOOTER,
    HEADER,
    KIND,
    Buffer,
    Entry,
    ExperienceBuffer,
    contrastive_note,
    extremes,
    turn_texts,
)

from support.judges import requests_for


def entry(reward: float, name: str) -> Entry:
    return Entry(task=f"task {name}", instruction=f"do {name}", answer=f"ans {name}", reward=reward, critique=name)


def test_the_oldest_entry_is_evicted_once_the_key_is_full():
    buffer = Buffer(size=3)
    for r, name in [(0.0, "a"), (1.0, "b"), (0.5, "c"), (0.2, "d")]:
        buffer.add("k", entry(r, name))
    buffer.add("other", entry(1.0, "z"))
    # size 3 per key: a (oldest) left; the other key keeps its own list
    assert [e.critique for e in buffer.entries["k"]] == ["b", "c", "d"]
    assert len(buffer) == 4


def test_select_shows_the_best_and_the_worst_other_entries_most_recent_first_on_ties():
    buffer = Buffer(size=10)
    for r, name in [(1.0, "a"), (0.0, "b"), (1.0, "c"), (0.5, "d"), (0.0, "e")]:
        buffer.add("k", entry(r, name))
    best, worst = buffer.select("k", best=1, worst=1)
    # best: reward 1.0 ties a (age 0) and c (age 2): the more recent c; worst: 0.0 ties b, e: the more recent e
    assert [e.critique for e in best] == ["c"] and [e.critique for e in worst] == ["e"]
    best, worst = buffer.select("k", best=2, worst=2)
    # top 2 = c, a; the worst two of the rest (b, d, e) by reward then recency = e (0.0, age 4), b (0.0, age 1)
    assert [e.critique for e in best] == ["c", "a"] and [e.critique for e in worst] == ["e", "b"]
    # one entry: it is the best, nothing is left for the worst; an unknown key shows nothing
    one = Buffer(size=2)
    one.add("k", entry(0.0, "x"))
    assert [[e.critique for e in side] for side in one.select("k", 1, 1)] == [["x"], []]
    assert one.select("nope", 1, 1) == ([], [])


def test_the_contrastive_note_lists_best_then_worst_with_reward_task_instruction_and_critique():
    note = contrastive_note([entry(1.0, "a")], [entry(0.0, "b")], chars=300)
    assert note == (
        f"{HEADER}\n\n"
        "Better (reward 1.00) for the task 'task a': 'do a'\nCritique: a\n\n"
        "Worse (reward 0.00) for the task 'task b': 'do b'\nCritique: b\n\n"
        f"{FOOTER}"
    )
    cut = contrastive_note([Entry("t" * 10, "i" * 10, "", 0.5, "")], [], chars=4)
    assert "for the task 'tttt': 'iiii'\nCritique: (none)" in cut  # cut to chars; an empty critique says so


def test_extremes_pick_the_best_and_worst_rollout_of_a_group_first_on_ties():
    # rewards [0.5, 1.0, 0.0, 1.0]: best = index 1 (first of the two 1.0), worst = index 2
    assert extremes(torch.tensor([0.5, 1.0, 0.0, 1.0])) == [1, 2]
    assert extremes(torch.tensor([0.0, 0.0, 0.0])) == [0, 1]  # all tied: first as best, second as worst
    assert extremes(torch.tensor([float("nan"), 0.3, float("nan")])) == [1]  # NaN left out; one left: one entry
    assert extremes(torch.tensor([float("nan")])) == []


def test_turn_texts_read_the_last_instruction_and_the_worker_answer_after_it():
    episode = [
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "Worker: 3"},
        {"role": "assistant", "content": "second"},
        {"role": "user", "content": "Worker: 7"},
    ]
    assert turn_texts(episode) == ("second", "7")
    assert turn_texts([{"role": "assistant", "content": "cut off"}]) == ("cut off", "")  # truncated: no answer
    assert turn_texts("plain completion") == ("plain completion", "")


def strategy(server, **fields) -> ExperienceBuffer:
    critic = {"backend": "openai", "base_url": f"{server}/critic/v1", "max_new_tokens": 8}
    return ExperienceBuffer(build_config(ExperienceBuffer.Config, {"critic": critic, **fields}, "algorithm.rollout"))


def test_adjust_rewards_adds_each_groups_extremes_with_a_critique_and_logs_both_kinds(server):
    s = strategy(server, buffer_size=3)
    rows = [{"question": "What is 2 + 2?", "answer": "4"}] * 3 + [{"question": "What is 3 * 3?", "answer": "9"}] * 3
    completions = [[{"role": "assistant", "content": f"ins {i}"}, {"role": "user", "content": f"Worker: {i}"}]
                   for i in range(6)]  # fmt: skip
    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    kinds = ["natural", "natural", KIND, "natural", "natural", KIND]
    out, metrics = s.adjust_rewards(rewards, kinds, rows, completions, group_size=3)
    assert torch.equal(out, rewards)  # rewards unchanged
    # group 1 (rows 0-2): best 1 (1.0), worst 0 (first 0.0); group 2 (rows 3-5): best 5, worst 3; size 3 evicts row 1's
    kept = s.buffer.entries[""]
    assert [(e.instruction, e.answer, e.reward) for e in kept] == [("ins 0", "0", 0.0), ("ins 5", "5", 1.0),
                                                                  ("ins 3", "3", 0.0)]  # fmt: skip
    asks = [e["prompt"] for e in requests_for("critic")]
    assert (
        len(asks) == 4 and "Task: What is 2 + 2?\n\nInstruction: ins 1\n\nWorker's answer: 1\n\nReward: 1.00" in asks[0]
    )
    assert all("4" not in a.split("Reward:")[0].split("Task:")[0] for a in asks)  # the critic never sees the gold
    assert all(e.critique == "no" for e in kept)  # the endpoint's reply
    assert metrics["experience_buffer/buffer_size"] == 3.0
    assert metrics["experience_buffer/critique_chars_mean"] == 2.0  # "no"
    # conditioned rows 2 and 5: (0 + 1) / 2; plain rows 0, 1, 3, 4: (0 + 1 + 0 + 0) / 4
    assert metrics["experience_buffer/conditioned_reward_mean"] == 0.5
    assert metrics["experience_buffer/plain_reward_mean"] == 0.25
    assert s.step == 1 and all(e.step == 0 for e in kept)
    # checkpoint round trip
    fresh = strategy(server, buffer_size=3)
    fresh.load_state_dict(s.state_dict())
    assert fresh.state_dict() == s.state_dict() and fresh.buffer.select("", 1, 1)[0][0].instruction == "ins 5"


def test_a_failed_critique_keeps_the_entry_without_one():
    s = ExperienceBuffer(build_config(ExperienceBuffer.Config, {"critic": {"backend": "openai",
                         "base_url": "http://127.0.0.1:9/v1", "timeout_s": 1.0}}, "algorithm.rollout"))  # fmt: skip
    rows = [{"question": "q", "answer": "1"}] * 2
    _, metrics = s.adjust_rewards(torch.tensor([1.0, 0.0]), ["natural"] * 2, rows, ["a", "b"], group_size=2)
    assert [e.critique for e in s.buffer.entries[""]] == ["", ""] and metrics[
        "experience_buffer/critique_chars_mean"
    ] == 0
    assert "experience_buffer/conditioned_reward_mean" not in metrics  # no conditioned rollout this batch
    assert not math.isnan(metrics["experience_buffer/plain_reward_mean"])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"critic_instruction": "no placeholders"}, "critic_instruction must contain"),
        ({"show_best": 0, "show_worst": 0}, "show_best \\+ show_worst must be >= 1"),
    ],
)
def test_bad_settings_are_refused(fields, message):
    with pytest.raises(Exception, match=message):
        build_config(ExperienceBuffer.Config, fields, "algorithm.rollout")
