"""The bundled simulated-user task: a traveller with a hidden goal (a train ticket: city, day, class) talks to the
policy, a booking assistant (``data=booking data/env=simulated_user``). Invented cities, so nothing is known
in advance; the policy must ask.

    python -m rlpost.envs.booking_data    # rewrites recipes/data/booking{,_eval}.jsonl

Rows: ``question`` (the traveller's opening line with a name, so that no two rows share a prompt; it never
states the goal), ``answer`` ("city, day,
class", for logs), and the hidden goal as ``goal_city``, ``goal_day``, ``goal_class``: 100 training and 40
held-out rows, held-out goals not among the training ones. Deterministic from ``SEED``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from rlpost.core.schema import RESOURCES
from rlpost.envs.search_data import FIRST, LAST

SEED = 20261205
CITIES = ["Varnholm", "Teskara", "Lowmere", "Brisca", "Ondrel", "Caldry", "Fennick", "Istra", "Jovell", "Lorn"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
CLASSES = ["first", "second"]
OPENINGS = ["Hi, I need a train ticket.", "Hello, can you book a train for me?", "I'd like to travel by train.",
            "Good morning, I need to book a trip."]  # fmt: skip
DATA = RESOURCES / "recipes" / "data"


def build(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows)."""
    rng = random.Random(seed)
    goals = [(c, d, k) for c in CITIES for d in DAYS for k in CLASSES]
    rng.shuffle(goals)
    held_out_goals, train_goals = goals[:40], goals[40:]
    names = iter(rng.sample([f"{first} {last}" for first in FIRST for last in LAST], len(goals)))

    def row(goal: tuple[str, str, str]) -> dict:  # a traveller's name makes every opening line distinct
        city, day, ticket = goal
        return {"question": f"Hi, I'm {next(names)}. {rng.choice(OPENINGS)}", "answer": f"{city}, {day}, {ticket}",
                "goal_city": city, "goal_day": day, "goal_class": ticket}  # fmt: skip

    return [row(g) for g in train_goals], [row(g) for g in held_out_goals]


def write(folder: Path = DATA) -> None:
    train, held_out = build()
    for name, rows in (("booking", train), ("booking_eval", held_out)):
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    write()
