"""``data=persona_arithmetic``: arithmetic asked of a character whose profile has 0..``max_traits`` traits (CRPO,
seed 004 #8), generated from a seed.

CRPO adapts its constraint to the *character's complexity*; the default arithmetic data has no character, and its
question ("Calculate 5 * 33.") gives every row the same complexity. Each row here is a character profile, a
role and k traits drawn without replacement (k uniform in 0..``max_traits``, so profiles run from a bare role to a
dense one), and an a op b question (operands of 1..2 digits; the ``answer`` is the number). Columns: ``question``,
``answer``, ``profile`` (the text ``algorithm/loss=adaptive_clip`` reads with ``profile_column: profile``: its
distinct words give the complexity), ``traits`` (k, for ``eval.group_by``). The roles and traits are made up for
rlpost; no role-play data set is bundled or can be fetched here.
"""

from __future__ import annotations

import random

ROLES = (
    "a pirate captain",
    "a retired librarian",
    "a space station engineer",
    "a medieval baker",
    "a jazz drummer",
    "a park ranger",
    "a chess grandmaster",
    "a lighthouse keeper",
)
TRAITS = (
    "speaks in short clipped sentences",
    "loves terrible puns about numbers",
    "is deeply suspicious of calculators",
    "quotes old sea shanties",
    "worries constantly about being late",
    "counts on fingers out loud",
    "collects antique maps",
    "distrusts round numbers",
    "hums jazz standards while thinking",
    "apologizes far too often",
    "boasts about past adventures",
    "explains everything twice",
    "keeps a pet parrot named Digit",
    "speaks formally like a butler",
    "grew up on a remote island",
    "secretly fears thunderstorms",
)


def persona_rows(seed: int, size: int, max_traits: int = 6, max_digits: int = 2) -> list[dict]:
    """``size`` rows drawn with ``seed`` (columns: question, answer, profile, traits)."""
    if not 0 <= max_traits <= len(TRAITS):
        raise ValueError(f"max_traits must be in 0..{len(TRAITS)}, got {max_traits}")
    if not 1 <= max_digits <= 6:
        raise ValueError(f"max_digits must be in 1..6, got {max_digits}")
    rng = random.Random(seed)
    rows = []
    for _ in range(size):
        k = rng.randint(0, max_traits)
        traits = rng.sample(TRAITS, k)
        role = rng.choice(ROLES)
        profile = (
            role if not traits else f"{role} who " + ", ".join(traits[:-1]) + (" and " if k > 1 else "") + traits[-1]
        )
        a, b = (rng.randint(0, 10**max_digits - 1) for _ in range(2))
        op = rng.choice("+-*")
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        rows.append({"question": f"Calculate {a} {op} {b}.", "answer": str(value), "profile": profile, "traits": k})
    return rows
