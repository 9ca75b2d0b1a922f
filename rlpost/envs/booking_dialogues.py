"""The bundled logged dialogues of the booking task: what the simulated user is calibrated to (seed 004 #5).

    python -m rlpost.envs.booking_dialogues    # rewrites recipes/data/booking_dialogues{,_eval}.jsonl

Where they come from: no logged human booking dialogues can be downloaded here, so they are generated. A
scripted booking assistant (it asks for the slots still missing, one or two at a time, in a few phrasings,
then books) talks to the scripted traveller (rlpost/envs/scripted_traveller.py: it answers what was asked in
a short phrase and sometimes volunteers one more slot), with the goals and opening lines of the first 80
training rows of ``data=booking``: 60 dialogues to calibrate on and 20 held out to measure the gap. No
held-out booking goal appears. They are a stand-in for human logs: calibrating to them and then judging the
policy against the same traveller (``data.env.held_out_user=scripted``) measures the mechanism of calibrated
interactive RL, not a gap to real people.

A row: ``goal_city``, ``goal_day``, ``goal_class`` and ``turns``, the dialogue from the assistant's side
(``user``: the traveller, ``assistant``: the booking assistant), opening line first, booking last.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from rlpost.envs.booking_data import DATA, build
from rlpost.envs.scripted_traveller import SLOTS, traveller_reply

SEED = 5
QUESTIONS = {
    ("city",): ["Where would you like to go?", "What is your destination?", "Which city are you travelling to?"],
    ("day",): ["Which day do you want to travel?", "When would you like to leave?", "What day is your trip?"],
    ("class",): ["First or second class?", "Which class would you like?"],
    ("city", "day"): ["Where and when would you like to travel?", "Which city, and on what day?"],
}


def dialogue(row: dict, rng: random.Random) -> dict:
    """One logged dialogue for a data row: the scripted assistant asks until it knows the goal, then books."""
    goal = {"city": row["goal_city"], "day": row["goal_day"], "class": row["goal_class"]}
    turns = [{"role": "user", "content": row["question"]}]
    given: set[str] = set()
    while len(given) < len(SLOTS):
        missing = tuple(s for s in SLOTS if s not in given)
        ask = missing[:2] if missing[:2] in QUESTIONS and rng.random() < 0.3 else missing[:1]
        question = rng.choice(QUESTIONS[ask])
        turns.append({"role": "assistant", "content": question})
        turns.append(
            {"role": "user", "content": traveller_reply(goal, question, given, f"{row['question']}|{len(turns)}")}
        )
    turns.append({"role": "assistant", "content": f"BOOK: {goal['city']}, {goal['day']}, {goal['class']}"})
    return {"goal_city": goal["city"], "goal_day": goal["day"], "goal_class": goal["class"], "turns": turns}


def dialogues(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """(60 dialogues to calibrate on, 20 held out), from the first 80 training rows of data=booking."""
    rng = random.Random(seed)
    rows = build()[0][:80]
    logged = [dialogue(r, rng) for r in rows]
    return logged[:60], logged[60:]


def write(folder: Path = DATA) -> None:
    train, held_out = dialogues()
    for name, rows in (("booking_dialogues", train), ("booking_dialogues_eval", held_out)):
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {path} ({len(rows)} dialogues)")


if __name__ == "__main__":
    write()
