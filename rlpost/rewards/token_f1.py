"""``token_f1`` (seed 000 #19): bag-of-tokens F1 of the completion's answer against a gold reference, in [0, 1]::

    token_f1 = 2 P R / (P + R),  P = |c ∩ g| / |c|,  R = |c ∩ g| / |g|   (bags of tokens, SQuAD-style)

Choices where the abstract is silent:
- The answer is the text after a ``</think>`` trace (``strip_think: true``).
- Tokens: lowercase, punctuation dropped, split on whitespace (the SQuAD normalization, without
  article removal, which is English-only); both empty gives 1.0, one empty gives 0.0.
- A list-valued reference column is several references (the best F1 counts); a ``None`` reference
  makes the sample unscorable (``None``).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rlpost.rewards.base import REWARDS, Reward, answers_and_references

_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")


def f1_tokens(text: str) -> list[str]:
    """SQuAD-style tokens: lowercase, punctuation removed, whitespace split."""
    return _PUNCT.sub(" ", text.lower()).split()


def token_f1(answer: str, reference: str) -> float:
    """Bag-of-tokens F1 of two strings (see the module docstring)."""
    a, g = f1_tokens(answer), f1_tokens(reference)
    if not a or not g:
        return float(a == g)
    common = sum((Counter(a) & Counter(g)).values())
    if common == 0:
        return 0.0
    p, r = common / len(a), common / len(g)
    return 2 * p * r / (p + r)


@REWARDS.register("token_f1")
class TokenF1(Reward):
    """Bag-of-tokens F1 between the answer and the reference (max over several references)."""

    seed = "seed 000 #19"

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the reference (a string or a list of strings)
        strip_think: bool = True  # score only the text after </think>

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> rewards ``[N]`` in [0, 1] (None without a reference)."""
        return [
            None if item is None else max(token_f1(item[0], r) for r in item[1])
            for item in answers_and_references(self, completions, kwargs)
        ]
