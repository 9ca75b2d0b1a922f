"""Task families for SKILLER (seed 000 #2, ``data=skill_families``, ``data/env=skill_executor``): one row is
one family of arithmetic tasks, shown to the policy with a few worked examples, and a pool of other tasks of the
same family that a frozen executor solves with the policy's skill document.

Row columns (``data.source=generated``, ``data.task=skill_families``)::

    question  the family's description and ``examples`` worked examples ("Calculate 23 + 45. -> 68")
    answer    the family's name (not a gold answer: the gold answers are the tasks')
    family    the family's name
    tasks     JSON list of ``pool`` [question, answer] pairs, none of them an example

Choices (the seed names no task set): six families of two- and three-operand integer arithmetic, the
operations SmolLM2-135M gets partly right (``FAMILIES``); questions read like reasoning-gym's
basic_arithmetic ("Calculate 23 + 45."); rows cycle through the families in a seeded order so every family
appears equally often; the held-out rows (``seed + 1000003``) draw other tasks and other examples of the same
families: "unseen tasks" (a task may coincide with a training task by chance, e.g. 2-digit addition has
8100 of them).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

Task = tuple[str, int]  # (question, gold answer)


def _pair(lo_a: int, hi_a: int, lo_b: int, hi_b: int, op: str) -> Callable[[random.Random], Task]:
    def draw(rng: random.Random) -> Task:
        a, b = rng.randint(lo_a, hi_a), rng.randint(lo_b, hi_b)
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        return f"Calculate {a} {op} {b}.", value

    return draw


def _three(ops: tuple[str, str], lo: tuple[int, int, int], hi: tuple[int, int, int]) -> Callable[[random.Random], Task]:
    def draw(rng: random.Random) -> Task:
        a, b, c = (rng.randint(lo[i], hi[i]) for i in range(3))
        # left to right, except that * binds first (a * b + c is the only product family)
        first = a * b if ops[0] == "*" else a + b if ops[0] == "+" else a - b
        value = first + c if ops[1] == "+" else first - c
        return f"Calculate {a} {ops[0]} {b} {ops[1]} {c}.", value

    return draw


# name -> (the description the policy reads, a task drawer)
FAMILIES: dict[str, tuple[str, Callable[[random.Random], Task]]] = {
    "add_2digit": ("adding two 2-digit numbers", _pair(10, 99, 10, 99, "+")),
    "subtract_2digit": (
        "subtracting a 2-digit number from another (the result may be negative)",
        _pair(10, 99, 10, 99, "-"),
    ),
    "multiply_1x2": ("multiplying a 2-digit number by a 1-digit number", _pair(10, 99, 2, 9, "*")),
    "sum_3terms": ("adding three numbers of one or two digits", _three(("+", "+"), (1, 1, 1), (99, 99, 99))),
    "add_then_subtract": ("a + b - c with numbers of one or two digits", _three(("+", "-"), (1, 1, 1), (99, 99, 99))),
    "multiply_then_add": (
        "a * b + c with one-digit a and b and a two-digit c",
        _three(("*", "+"), (2, 2, 10), (9, 9, 99)),
    ),
}


def skill_family_rows(
    seed: int, size: int, families: list[str] | None = None, examples: int = 2, pool: int = 8
) -> list[dict]:
    """``size`` rows (module docstring), each of one family with ``examples`` worked examples and ``pool`` tasks."""
    names = list(families) if families else list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown families {unknown}; choices: {', '.join(FAMILIES)}")
    if examples < 0 or pool < 1:
        raise ValueError(f"examples={examples} must be >= 0 and pool={pool} >= 1")
    rng = random.Random(seed)
    rows = []
    for i in range(size):
        if i % len(names) == 0:
            order = rng.sample(names, len(names))  # each family once per cycle, in a seeded order
        name = order[i % len(names)]
        description, draw = FAMILIES[name]
        drawn: dict[str, int] = {}
        while len(drawn) < examples + pool:  # distinct questions: no example is also a task
            question, value = draw(rng)
            drawn.setdefault(question, value)
        items = list(drawn.items())
        shown = "\n".join(f"- {q} -> {a}" for q, a in items[:examples])
        question = (
            f"Task family: {description}.\nExample tasks and answers:\n{shown}"
            if examples
            else (f"Task family: {description}.")
        )
        tasks = [[q, str(a)] for q, a in items[examples:]]
        rows.append({"question": question, "answer": name, "family": name, "tasks": json.dumps(tasks)})
    return rows
