"""``data=infill``: maximum-likelihood infilling tasks (Frost, seed 004 #1) from the bundled documents.

Each sentence of ``recipes/data/ares_documents.jsonl`` (ten short texts written for rlpost) with at least
``min_words`` words gives tasks: a blank of ``span`` words (2 or 3) at a seeded position, never the first
or last two words, so both sides carry context. The row keeps ``prefix`` and ``suffix`` (what
``reward=infill_likelihood`` reads) and the removed words as ``answer`` (a reference, not a target: any
fill that makes the suffix likely scores well). The held-out split (another seed) is other blanks of
the same sentences minus every training prompt, so it measures filling in, not recall of a document.
"""

from __future__ import annotations

import json
import random
import re

from rlpost.core.schema import RESOURCES

DOCUMENTS = RESOURCES / "recipes" / "data" / "ares_documents.jsonl"
TEMPLATE = 'Fill in the blank with {span} words so that the sentence reads naturally:\n"{prefix} ____ {suffix}"\nReply with the missing words only.'


def sentences(min_words: int) -> list[list[str]]:
    out = []
    for line in DOCUMENTS.read_text(encoding="utf-8").splitlines():
        for sentence in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]):
            words = sentence.split()
            if len(words) >= min_words:
                out.append(words)
    return out


def infill_rows(seed: int, size: int, min_words: int = 8) -> list[dict]:
    """``size`` blanked sentences drawn with ``seed`` (rows: question, prefix, suffix, answer)."""
    pool = sentences(min_words)
    if not pool:
        raise ValueError(f"no sentence of the bundled documents has {min_words} words or more")
    rng = random.Random(seed)
    rows = []
    for _ in range(size):
        words = rng.choice(pool)
        span = rng.choice((2, 3))
        start = rng.randrange(2, len(words) - span - 1)
        prefix, suffix = " ".join(words[:start]), " ".join(words[start + span :])
        rows.append(
            {
                "question": TEMPLATE.format(span=span, prefix=prefix, suffix=suffix),
                "prefix": prefix,
                "suffix": suffix,
                "answer": " ".join(words[start : start + span]),
            }
        )
    return rows
