"""``data=staged_arith``: multi-step arithmetic answered in three checkable stages, for StructPO (seed 000 #10),
generated from a seed.

A row starts from a number and applies ``steps`` operations to the running value, in order, asked in words::

    "Start with 12. Add 5, then multiply by 3, then subtract 4. What is the result?"

The template (conf/data/staged_arith.yaml) asks for three stages, each in its own tags: ``<plan>`` the operations
in order, ``<compute>`` each step with its result, ``<answer>`` the final number. Each stage is checked against
its own column (``reward=stage_check``, rlpost/rewards/stage_check.py):

    plan           "+ 5, * 3, - 4"       the operations in order                  (check: steps)
    intermediates  "17, 51, 47"          the running value after each step        (check: results)
    answer         "47"                  the final value                          (check: number; and math_answer)
    solution       "<plan>+ 5, * 3, - 4</plan>\\n<compute>12 + 5 = 17\\n17 * 3 = 51\\n51 - 4 = 47</compute>\\n
                   <answer>47</answer>"  the gold stage-format completion: the cold start's target,
                                         ``rlpost sft data=staged_arith 'target="{solution}"'``
    steps          3                     the number of operations (``eval.group_by=steps``)

Choices where nothing dictated one: the operations are + - * on integers (no division, so every value is
exact); a start, addend or subtrahend is drawn from 1..``max_operand``, a factor from 2..``max_factor`` (a
factor of 1 or 0 would make a step trivial); a subtraction may go below zero (the sign is part of the result);
the number of steps is uniform in ``min_steps``..``max_steps``. The held-out split (seed + 1000003) is other
draws minus every training prompt.
"""

from __future__ import annotations

import random

WORDS = {"+": "add {b}", "-": "subtract {b}", "*": "multiply by {b}"}


def _row(rng: random.Random, steps: int, max_operand: int, max_factor: int) -> dict:
    value = rng.randint(1, max_operand)
    start, phrases, plan, lines, results = value, [], [], [], []
    for _ in range(steps):
        op = rng.choice("+-*")
        b = rng.randint(2, max_factor) if op == "*" else rng.randint(1, max_operand)
        after = {"+": value + b, "-": value - b, "*": value * b}[op]
        phrases.append(WORDS[op].format(b=b))
        plan.append(f"{op} {b}")
        lines.append(f"{value} {op} {b} = {after}")
        results.append(str(after))
        value = after
    said = ", then ".join(phrases)
    question = f"Start with {start}. {said[0].upper()}{said[1:]}. What is the result?"
    plan_text, intermediates = ", ".join(plan), ", ".join(results)
    compute = "\n".join(lines)
    solution = f"<plan>{plan_text}</plan>\n<compute>{compute}</compute>\n<answer>{value}</answer>"
    return {
        "question": question,
        "answer": str(value),
        "plan": plan_text,
        "intermediates": intermediates,
        "solution": solution,
        "steps": steps,
    }


def staged_arith_rows(
    seed: int, size: int, min_steps: int = 2, max_steps: int = 3, max_operand: int = 20, max_factor: int = 9
) -> list[dict]:
    """``size`` rows drawn with ``seed`` (columns: question, answer, plan, intermediates, solution, steps)."""
    if not 1 <= min_steps <= max_steps <= 8:
        raise ValueError(f"need 1 <= min_steps <= max_steps <= 8, got min_steps={min_steps}, max_steps={max_steps}")
    if max_operand < 1 or max_factor < 2:
        raise ValueError(f"need max_operand >= 1 and max_factor >= 2, got {max_operand}, {max_factor}")
    rng = random.Random(seed)
    return [_row(rng, rng.randint(min_steps, max_steps), max_operand, max_factor) for _ in range(size)]
