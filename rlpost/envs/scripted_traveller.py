"""The scripted traveller: a rule-based user of the booking task that stands in for real users (seed 004 #5's
"logged dialogues" and "real conversations", which cannot be downloaded here).

It answers what the assistant asked, in a short phrase, the way booking-dialogue corpora show travellers answer:
a question about the destination gets the city, about the date the day, about the ticket the class; a question
about several slots gets all of them; a turn that asks nothing it recognises gets the next slot not yet given.
Sometimes (``volunteer``, 25%) it adds one more slot unasked. Its wording is drawn from a few phrasings per slot.
Everything is a function of (the opening line, the turn number): two runs of an episode say the same words.

It plays two parts: the user side of the bundled logged dialogues (rlpost/envs/booking_dialogues.py: what the
simulator is calibrated to, rlpost/tools/sim_alignment.py) and the user of held-out episodes with
``data.env.held_out_user=scripted`` (the "real users" a policy trained against a simulator is judged by).
"""

from __future__ import annotations

import random
import re

ASKS = {  # slot -> what in an assistant turn asks for it
    "city": re.compile(r"\b(where|destination|city|going|go to|travel(l?ing)? to|heading)\b", re.I),
    "day": re.compile(r"\b(when|day|date|which day|what day)\b", re.I),
    "class": re.compile(r"\b(class|first or second|seat|ticket type)\b", re.I),
}
PHRASES = {
    "city": ["To {city}.", "I'm going to {city}.", "{city}, please.", "I want to go to {city}."],
    "day": ["On {day}.", "{day}.", "This {day}.", "I'd like to leave on {day}."],
    "class": ["{cls} class.", "{cls} class, please.", "In {cls} class.", "A {cls} class ticket."],
}
SLOTS = ("city", "day", "class")
DONE = ["That's everything.", "That's all, thanks.", "Nothing else, thank you."]


def asked_slots(assistant_turn: str) -> list[str]:
    """The slots an assistant turn asks about, in SLOTS order."""
    return [slot for slot in SLOTS if ASKS[slot].search(assistant_turn)]


def traveller_reply(
    goal: dict[str, str], assistant_turn: str, given: set[str], key: str, volunteer: float = 0.25
) -> str:
    """The traveller's answer to ``assistant_turn``; ``goal``: {city, day, class}; ``given``: slots already said
    (updated in place); ``key``: seeds the wording (the opening line and the turn number)."""
    rng = random.Random(key)
    slots = asked_slots(assistant_turn) or [s for s in SLOTS if s not in given][:1]
    if not slots:
        return rng.choice(DONE)
    rest = [s for s in SLOTS if s not in given and s not in slots]
    if rest and rng.random() < volunteer:
        slots.append(rest[0])
    values = {"city": goal["city"], "day": goal["day"], "cls": goal["class"].capitalize()}
    given.update(slots)
    return " ".join(rng.choice(PHRASES[s]).format(**values) for s in slots)
