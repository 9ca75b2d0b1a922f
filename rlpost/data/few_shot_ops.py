"""``data=few_shot_ops``: made-up binary operators defined only by per-query demonstrations, for FSA-GRPO
(seed 004 #2), generated from a seed.

FSA-GRPO's claim is few-shot adaptation: a model trained on some demonstration-conditioned tasks gets better at
using the demonstrations of tasks it never trained on. Each row is one query on one operator, a small integer
function of two operands (``2*a + b``, ``a*b - 1``, ``max(a, b)*2 + 3``, ...), named by a made-up word that says
nothing about it, shown through ``demos`` input/output pairs of that same operator (drawn per row)::

    question   "blorp is a made-up operator on two numbers. Examples:
                3 blorp 5 = 11
                2 blorp 7 = 11
                4 blorp 1 = 9
                What is 6 blorp 2? Give only the number."
    zero_shot  "blorp is a made-up operator on two numbers.
                What is 6 blorp 2? Give only the number."       (the same query without its demonstrations)
    answer     "14"
    operator   "blorp"      (the operator's id: its name; one name per operator)
    rule       "2*a + b"    (for reading, never shown)
    demo_answers  '["11", "11", "9"]'  (JSON: the demonstrations' outputs, what a demo-copying answer writes)

Unseen operators at test: the operator pool (``FAMILIES``, every distinct function once, 98 of them) is split
by ``operator_seed`` alone into held-out operators (``held_out_share`` of the pool) and training operators, so
the two splits share no operator whatever the data seed; ``data.seed`` draws the rows (operator, operands,
demonstrations). ``rlpost.data.sources`` passes ``held_out=True`` for the held-out split (``HELD_OUT_AWARE`` in
rlpost/data/generated.py).

Choices where the seed is silent (it is about speech; this is a text stand-in): operands are integers in
``1..operand_max``; the demonstrations are ``demos`` distinct operand pairs other than the query's, so a linear
operator ``p*a + q*b + c`` is pinned down by 3 of them; the instruction is part of both texts (the data template
is ``{question}``), so ``zero_shot`` is a whole user turn that the reward and the ``eval.without_demos`` readout
put in place of the prompt's; names are unique per operator, so a training operator can be memorised by name
(its zero-shot accuracy can rise, what FSA-GRPO's reward discounts) while a held-out one cannot.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

QUESTION = "{name} is a made-up operator on two numbers."
QUERY = "What is {a} {name} {b}? Give only the number."
Op = tuple[str, Callable[[int, int], int]]  # (rule as text, the function)


def _linear(p: int, q: int, c: int) -> Op:
    rule = f"{p}*a + {q}*b" + (f" + {c}" if c > 0 else f" - {-c}" if c < 0 else "")
    return rule.replace("1*", ""), lambda a, b: p * a + q * b + c


def _product(c: int) -> Op:
    return "a*b" + (f" + {c}" if c > 0 else f" - {-c}" if c < 0 else ""), lambda a, b: a * b + c


def _difference(p: int, q: int) -> Op:
    return f"{p}*a - {q}*b".replace("1*", ""), lambda a, b: p * a - q * b


def _extreme(kind: str, p: int, c: int) -> Op:
    f = max if kind == "max" else min
    return f"{kind}(a, b)*{p} + {c}", lambda a, b: f(a, b) * p + c


def _square(q: int) -> Op:
    return f"a*a + {q}*b".replace(" 1*", " "), lambda a, b: a * a + q * b


def operator_pool(operand_max: int = 9) -> list[Op]:
    """Every operator of the families once, in a fixed order; two rules that agree on every operand pair in
    ``1..operand_max`` are one operator (the first kept)."""
    ops = [_linear(p, q, c) for p in (1, 2, 3) for q in (1, 2, 3) for c in range(-3, 4)]
    ops += [_product(c) for c in range(-3, 4)]
    ops += [_difference(p, q) for p in (1, 2, 3) for q in (1, 2, 3)]
    ops += [_extreme(kind, p, c) for kind in ("max", "min") for p in (1, 2) for c in (0, 1, 2, 3)]
    ops += [_square(q) for q in (1, 2, 3)]
    grid = [(a, b) for a in range(1, operand_max + 1) for b in range(1, operand_max + 1)]
    seen: set[tuple[int, ...]] = set()
    pool = []
    for rule, f in ops:
        values = tuple(f(a, b) for a, b in grid)
        if values not in seen:
            seen.add(values)
            pool.append((rule, f))
    return pool


def operator_names(n: int, seed: int) -> list[str]:
    """``n`` distinct made-up words (consonant-vowel-consonant-consonant), drawn with ``seed``."""
    rng = random.Random(seed)
    onset, vowel, coda = "bdfgklmnprstvz", "aeiou", ["rp", "nk", "sk", "mp", "lt", "nt", "rg", "sp"]
    words = sorted({o + v + c for o in onset for v in vowel for c in coda})
    return rng.sample(words, n)


def split_operators(
    held_out: bool, held_out_share: float, operator_seed: int, operand_max: int
) -> list[tuple[str, str, Callable]]:
    """This split's operators ``[(name, rule, f)]``: the pool shuffled with ``operator_seed``, its last
    ``round(held_out_share * len(pool))`` held out (at least one on each side)."""
    pool = operator_pool(operand_max)
    names = operator_names(len(pool), operator_seed)
    order = list(range(len(pool)))
    random.Random(operator_seed).shuffle(order)
    n_held = min(len(pool) - 1, max(1, round(held_out_share * len(pool))))
    mine = order[len(pool) - n_held :] if held_out else order[: len(pool) - n_held]
    return [(names[i], pool[i][0], pool[i][1]) for i in sorted(mine)]


def few_shot_ops_rows(
    seed: int,
    size: int,
    held_out: bool = False,
    demos: int = 3,
    operand_max: int = 9,
    held_out_share: float = 0.25,
    operator_seed: int = 0,
) -> list[dict]:
    """``size`` rows drawn with ``seed`` from the training operators (``held_out=True``: the held-out ones);
    columns: question, zero_shot, answer, operator, rule, demo_answers."""
    if demos < 0:
        raise ValueError(f"demos must be >= 0, got {demos}")
    if operand_max < 2 or operand_max * operand_max < demos + 1:
        raise ValueError(f"operand_max={operand_max} leaves fewer than demos + 1 = {demos + 1} operand pairs")
    if not 0.0 < held_out_share < 1.0:
        raise ValueError(f"held_out_share must be in (0, 1), got {held_out_share}")
    ops = split_operators(held_out, held_out_share, operator_seed, operand_max)
    pairs = [(a, b) for a in range(1, operand_max + 1) for b in range(1, operand_max + 1)]
    rng = random.Random(seed)
    rows = []
    for _ in range(size):
        name, rule, f = rng.choice(ops)
        drawn = rng.sample(pairs, demos + 1)  # the query, then its demonstrations (all distinct)
        (qa, qb), shown = drawn[0], drawn[1:]
        head, query = QUESTION.format(name=name), QUERY.format(a=qa, b=qb, name=name)
        lines = [f"{a} {name} {b} = {f(a, b)}" for a, b in shown]
        rows.append({
            "question": "\n".join([f"{head} Examples:", *lines, query]),
            "zero_shot": f"{head}\n{query}",
            "answer": str(f(qa, qb)),
            "operator": name,
            "rule": rule,
            "demo_answers": json.dumps([str(f(a, b)) for a, b in shown]),
        })  # fmt: skip
    return rows
