"""exact_match: 1.0 when the normalized completion equals the normalized gold answer, else 0.0.

A verifiable reward of METHODS.md section 3 (exact match). Normalization, applied to both sides:
``strip_think`` (drop a ``<think>`` trace), strip surrounding whitespace, optionally lowercase and
collapse runs of whitespace to one space. Nothing else (no punctuation or article removal): a
reward named "exact" should not guess; use ``math_answer`` for numbers, ``format`` for patterns.
A ``None`` gold makes the sample unscorable (``None``); an empty completion never matches a
non-empty gold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlpost.core.chat import answer_text
from rlpost.rewards.base import REWARDS, Reward, column


@REWARDS.register("exact_match")
class ExactMatch(Reward):
    """Normalized string equality of the completion and a gold column."""

    verifiable = True  # eval/accuracy's default criterion (rlpost/scoring/correctness.py)

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the gold answer
        lowercase: bool = True  # compare case-insensitively
        collapse_whitespace: bool = True  # runs of spaces/newlines count as one space
        strip_think: bool = True  # score only the text after </think>

    def normalize(self, text: str) -> str:
        text = text.strip()
        if self.cfg.lowercase:
            text = text.lower()
        if self.cfg.collapse_whitespace:
            text = re.sub(r"\s+", " ", text)
        return text

    def score_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` and the gold column ``[N]`` -> rewards ``[N]`` in {1.0, 0.0, None}."""
        golds = column(kwargs, self.cfg.column, len(completions), self.registry_name)
        rewards: list[float | None] = []
        for completion, gold in zip(completions, golds):
            if gold is None:
                rewards.append(None)
                continue
            text = answer_text(completion, self.cfg.strip_think)
            rewards.append(float(self.normalize(text) == self.normalize(str(gold))))
        return rewards
