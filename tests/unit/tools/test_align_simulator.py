"""rlpost align-simulator (calibrated interactive RL, seed 004 #5): SFT on the logged user turns lowers their
loss, the CLI writes the aligned simulator and the gap before/after, and bad input is refused before any model
loads, with nothing written."""

from __future__ import annotations

import json
import math

import torch
from safetensors.torch import load_file

from rlpost import cli
from rlpost.envs.base import row_messages
from rlpost.envs.simulated_user import SYSTEM, SimulatedUser, SimulatedUserConfig
from rlpost.models.loading import ModelConfig, load_model, load_tokenizer
from rlpost.tools.align_simulator import USER, read_dialogues
from rlpost.tools.sim_alignment import (
    align,
    batch_tensors,
    booking,
    encode,
    examples,
    gap,
    policy_examples,
    same_act,
    target_nll,
)

TINY = ["user_model=tiny-random", "max_new_tokens=4", "batch_size=4"]


def test_alignment_lowers_the_loss_of_the_logged_user_turns():
    config = ModelConfig(name="tiny-random", source="tiny_random")
    model, tok = load_model(config), load_tokenizer(config)
    train = [
        e for d in read_dialogues("recipes/data/booking_dialogues.jsonl", "dialogues")[:2] for e in examples(d, USER)
    ]

    def nll() -> float:
        with torch.no_grad():
            total, n = target_nll(model, *batch_tensors([encode(tok, e) for e in train], tok.pad_token_id))
        return float(total) / n

    before = nll()
    seen: list[float] = []
    losses = align(model, tok, train, steps=6, lr=3e-3, batch_size=len(train), seed=0, on_step=seen.append)
    assert seen == losses and len(losses) == 6 and all(math.isfinite(x) for x in losses)
    assert nll() < before - 0.5, (before, nll())  # a whole batch of the same turns six times: the loss falls


def test_cli_writes_the_aligned_simulator_and_the_gap(tmp_path, capsys):
    out = tmp_path / "sim"
    assert cli.main(["align-simulator", f"out={out}", *TINY, "steps=2"]) == 0
    report = json.loads((out / "alignment.json").read_text())
    assert len(report["losses"]) == 2 and report["train_turns"] == 138 and report["held_out_turns"] > 0
    for side in ("before", "after"):
        assert set(report[side]) == {"nll", "slot_match", "length_ratio"}
        assert all(math.isfinite(v) for v in report[side].values())
    assert report["after"]["nll"] != report["before"]["nll"]
    saved = load_file(str(out / "model" / "model.safetensors"))
    original = load_model(ModelConfig(name="tiny-random", source="tiny_random")).state_dict()
    assert any(not torch.equal(saved[k], original[k]) for k in saved if k in original)  # the weights moved
    assert "slot_match" in capsys.readouterr().out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


DIALOGUE = {"goal_city": "Lowmere", "goal_day": "Wednesday", "goal_class": "first", "turns": [
    {"role": "user", "content": "Hi, I'd like to travel by train."},
    {"role": "assistant", "content": "Which city are you travelling to?"},
    {"role": "user", "content": "To Lowmere, on Wednesday."},
    {"role": "assistant", "content": "First or second class?"},
    {"role": "user", "content": "First."},
    {"role": "assistant", "content": "BOOK: Lowmere, Wednesday, first"},
]}  # fmt: skip


def test_policy_examples_are_the_assistant_turns_in_the_context_the_environment_shows():
    found = policy_examples(DIALOGUE, SYSTEM)
    assert [e.target for e in found] == [t["content"] for t in DIALOGUE["turns"][1::2]]
    # the first turn's context is exactly what the simulated-user environment hands the policy at reset
    env = SimulatedUser(SimulatedUserConfig())
    row = {"prompt": [DIALOGUE["turns"][0]], "goal_city": "Lowmere", "goal_day": "Wednesday", "goal_class": "first"}
    assert found[0].messages == env.reset(row) == [{"role": "system", "content": SYSTEM}, *row_messages(row)]
    # later turns: the dialogue so far, the policy's own lines as assistant (no role swap, unlike the user side)
    assert found[2].messages[1:] == DIALOGUE["turns"][:5]
    assert found[2].goal == {"goal_city": "Lowmere", "goal_day": "Wednesday", "goal_class": "first"}


def test_act_match_asks_where_the_log_asks_and_books_exactly_what_it_books():
    question, book = policy_examples(DIALOGUE, SYSTEM)[1], policy_examples(DIALOGUE, SYSTEM)[2]
    # booking(): the environment's normalization (case, spaces, a trailing "class", a final period)
    assert booking("Sure. BOOK: lowmere , WEDNESDAY, First class.") == ("lowmere", "wednesday", "first")
    assert booking("Which day?") is None
    assert same_act("When would you like to leave?", question)  # any question where the log asks
    assert not same_act("BOOK: Lowmere, Wednesday, first", question)  # booking too early
    assert same_act("BOOK: Lowmere, Wednesday, First class", book)
    assert not same_act("BOOK: Lowmere, Tuesday, first", book)  # one slot wrong
    assert not same_act("Anything else?", book)  # asking where the log books


def test_policy_gap_scores_a_model_that_books_like_the_log():
    config = ModelConfig(name="tiny-random", source="tiny_random")
    model, tok = load_model(config), load_tokenizer(config)
    held_out = policy_examples(DIALOGUE, SYSTEM)
    report = gap(model, tok, held_out, batch_size=3, max_new_tokens=3, side="assistant")
    assert set(report) == {"nll", "act_match", "length_ratio"} and math.isfinite(report["nll"])
    # a random tiny model writes no BOOK line: it "asks" on the 2 question turns and fails the booking one
    assert report["act_match"] == 2 / 3


def test_cli_side_assistant_warm_starts_the_policy(tmp_path, capsys):
    out = tmp_path / "policy"
    assert cli.main(["align-simulator", f"out={out}", "side=assistant", *TINY, "steps=2"]) == 0
    report = json.loads((out / "alignment.json").read_text())
    assert report["side"] == "assistant" and report["train_turns"] == 198 and report["held_out_turns"] == 64
    assert set(report["before"]) == set(report["after"]) == {"nll", "act_match", "length_ratio"}
    assert report["after"]["nll"] != report["before"]["nll"]
    printed = capsys.readouterr().out
    assert "act_match" in printed and "warm-started policy" in printed


def test_cli_refuses_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"goal_city": "x"}) + "\n")
    cases = [
        ([], "out is required"),
        ([f"out={tmp_path}"], "exists; give a new folder"),
        ([f"out={tmp_path / 'a'}", "user_model=nope"], "is not a model config; choices: hf,"),
        ([f"out={tmp_path / 'a'}", f"dialogues={bad}"], "every line needs a 'turns' list"),
        ([f"out={tmp_path / 'a'}", "user_prompt='{goal_planet}'"], "lacks the column 'goal_planet'"),
        ([f"out={tmp_path / 'a'}", "steps=-1"], "steps"),
        ([f"out={tmp_path / 'a'}", "side=policy"], "side"),
    ]
    for args, message in cases:
        assert cli.main(["align-simulator", *args]) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "a").exists()
