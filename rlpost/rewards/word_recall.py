"""word_recall: the share of a row column's distinct content words that the completion uses, in [0, 1].

CRPO's style reward (seed 004 #8) is persona alignment: a reply in character speaks of the character. With no
role-play judge offline, ``recipe=crpo`` reads it lexically, as recall of the character profile's words::

    W(x)  = distinct lowercased words of x with >= min_letters letters, minus a few function words
    r     = |W(completion) ∩ W(column)| / |W(column)|        (0 when the column has no such word)

Choices (the seed gives no formula; this is a stand-in, not a persona-fidelity model): recall, not F1, so a
long in-character reply is not penalised for its other words; words of ``min_letters`` (4) letters or more,
so "a", "who", "and" do not count; the whole completion is read, trace included (``strip_think`` false by
default: thinking in character is in character). A ``None`` column value makes the sample unscorable. Easy to
game by echoing the profile: pair it with a task term (``reward/combine=decoupled`` keeps their scales apart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, Reward, column

STOP = frozenset({"that", "this", "with", "from", "have", "about", "while", "like", "your", "what", "when", "then"})


def content_words(text: str, min_letters: int) -> set[str]:
    """Distinct lowercased words of ``min_letters``+ letters, function words removed."""
    return {w.lower() for w in re.findall(rf"[^\W\d_]{{{min_letters},}}", text)} - STOP


@REWARDS.register("word_recall")
class WordRecall(Reward):
    """Share of a row column's distinct content words that the completion uses (a lexical persona-style term)."""

    seed = "seed 004 #8"

    @dataclass(frozen=True)
    class Config:
        column: str = "profile"  # dataset column whose words the completion should use (CRPO: the character profile)
        min_letters: Annotated[int, Range(ge=1)] = 4  # shorter words do not count
        strip_think: bool = False  # read only the text after </think>

    def score_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` and the column ``[N]`` -> recall of the column's words ``[N]`` in [0, 1]."""
        refs = column(kwargs, self.cfg.column, len(completions), self.registry_name)
        out: list[float | None] = []
        for completion, ref in zip(completions, refs):
            if ref is None:
                out.append(None)
                continue
            wanted = content_words(str(ref), self.cfg.min_letters)
            used = content_words(answer_text(completion, self.cfg.strip_think), self.cfg.min_letters)
            out.append(len(wanted & used) / len(wanted) if wanted else 0.0)
        return out
