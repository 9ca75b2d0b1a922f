"""``data=unanswerable_arithmetic``: arithmetic questions, some of which cannot be answered (seed 004 #7 TIAR,
seed 000 #9 RC-GRPO), generated from a seed.

An answerable row is ``a op b`` (op in + - *, operands of 1..``max_digits`` digits, so that some are out of a
small model's reach and abstaining is sometimes the honest reply), asked in one of a few phrasings; its
``answer`` is the number. An unanswerable row (a share ``unanswerable_share`` of the rows) is one of:

- ``missing_operand``: an operand is named but never given ("What is 36 plus the number I wrote down?"),
- ``undefined_quantity``: a variable or object with no value ("What is x * 7?", "How many marbles are in
  the bag if it holds 12 more than the box?"),
- ``division_by_zero``: "What is 40 divided by 0?" (no number is the answer);

its ``answer`` is ``"None"`` (the refusal string RC-GRPO's recipe asks for; no reward reads it as a number).
Every row has ``unanswerable`` (bool, what ``ternary_abstention`` and ``forced_refusal`` read) and ``kind``
(answerable or one of the three above, for ``eval.group_by=kind``). The held-out split (seed + 1000003) is
other draws of the same families minus every training prompt.
"""

from __future__ import annotations

import random

PHRASES = ("What is {a} {op} {b}?", "Compute {a} {op} {b}.", "Calculate {a} {op} {b}.")
WORDS = {"+": "plus", "-": "minus", "*": "times"}
OBJECTS = ("marbles", "apples", "coins", "books", "stamps", "pencils")
PLACES = (("bag", "box"), ("basket", "crate"), ("jar", "tin"), ("shelf", "drawer"))
VARIABLES = ("x", "y", "n", "k")
MISSING = (
    "What is {a} {word} the number I wrote down?",
    "What is the sum of {a} and the number on my ticket?",
    "Multiply {a} by the number of people in my family. What do you get?",
    "What is {a} minus my age?",
)
KINDS = ("missing_operand", "undefined_quantity", "division_by_zero")


def _operand(rng: random.Random, max_digits: int) -> int:
    digits = rng.randint(1, max_digits)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def _answerable(rng: random.Random, max_digits: int) -> dict:
    a, b, op = _operand(rng, max_digits), _operand(rng, max_digits), rng.choice("+-*")
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    question = rng.choice(PHRASES).format(a=a, op=op, b=b)
    return {"question": question, "answer": str(value), "unanswerable": False, "kind": "answerable"}


def _unanswerable(rng: random.Random, max_digits: int) -> dict:
    kind = rng.choice(KINDS)
    a = _operand(rng, max_digits)
    if kind == "missing_operand":
        op = rng.choice("+-*")
        question = rng.choice(MISSING).format(a=a, word=WORDS[op])
    elif kind == "undefined_quantity":
        if rng.random() < 0.5:
            question = rng.choice(PHRASES).format(a=rng.choice(VARIABLES), op=rng.choice("+-*"), b=a)
        else:
            thing, (here, there) = rng.choice(OBJECTS), rng.choice(PLACES)
            question = f"How many {thing} are in the {here} if it holds {a} more than the {there}?"
    else:
        question = rng.choice((f"What is {a} divided by 0?", f"Compute {a} / 0."))
    return {"question": question, "answer": "None", "unanswerable": True, "kind": kind}


def unanswerable_rows(seed: int, size: int, unanswerable_share: float = 0.4, max_digits: int = 2) -> list[dict]:
    """``size`` rows drawn with ``seed`` (columns: question, answer, unanswerable, kind)."""
    if not 0.0 <= unanswerable_share <= 1.0:
        raise ValueError(f"unanswerable_share must be in [0, 1], got {unanswerable_share}")
    if not 1 <= max_digits <= 6:
        raise ValueError(f"max_digits must be in 1..6, got {max_digits}")
    rng = random.Random(seed)
    return [(_unanswerable if rng.random() < unanswerable_share else _answerable)(rng, max_digits) for _ in range(size)]
