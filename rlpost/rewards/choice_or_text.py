"""choice_or_text: one rule reward for both AIR variant kinds (seed 004 #14): the option letter on a
multiple-choice anchor, the gold answer text on an open-ended rewording. 1.0 on a match, else 0.0.

The row's variant column says which rule applies; the gold column holds the letter for anchors and
the answer text for open variants (``|`` separates accepted alternatives, e.g. ``7|seven``).

- Anchor: the letter is read (after ``strip_think``) from the start of the answer, alone or followed
  only by ``) . : , ]`` or ``*`` (``B``, ``(B)``, ``B) Mars``, ``**B**``), else from ``answer: B`` /
  ``the answer is (B)`` anywhere; the letter must be upper case so the article in ``A planet ...``
  is not read as option A. No letter found: 0.0.
- Open: both sides lower-cased and whitespace-collapsed; ``contains`` (default) is 1.0 when an
  alternative occurs as a whole-word phrase in the answer, ``exact`` when the answer (trailing
  ``.``/``!`` dropped) equals one. ``contains`` is deliberately a loose, gameable proxy (an answer
  listing several candidates matches), like the open-ended rewards AIR is meant to be robust to;
  swap in a judge term for the real thing.
A ``None`` gold is unscorable (``None``); a variant that is neither value raises ValueError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from rlpost.core.chat import answer_text
from rlpost.rewards.base import REWARDS, Reward, column


@REWARDS.register("choice_or_text")
class ChoiceOrText(Reward):
    """Multiple-choice letter on anchor rows, gold answer text on open-ended rows (AIR data)."""

    verifiable = True  # eval/accuracy's default criterion (rlpost/scoring/correctness.py)

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # gold column: the option letter (anchor) or the answer text (open)
        variant_column: str = "variant"  # column naming the variant kind of the row
        anchor_value: str = "anchor"  # variant value of multiple-choice anchors
        open_value: str = "open"  # variant value of open-ended rewordings
        letters: str = "ABCD"  # the option letters
        open_match: Literal["contains", "exact"] = "contains"  # whole-word phrase anywhere, or the whole answer
        strip_think: bool = True  # score only the text after </think>

        def __post_init__(self):
            if self.open_match not in ("contains", "exact"):
                raise ValueError(f"Unknown open_match {self.open_match!r}. Valid choices: contains, exact.")
            if not self.letters or not self.letters.isalpha() or not self.letters.isupper():
                raise ValueError(f"letters must be upper-case letters, got {self.letters!r}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        letter = f"([{re.escape(cfg.letters)}])"
        self.leading = re.compile(rf"^[\s*\"'(\[]*{letter}(?=\s*$|[).:,\]*])")
        self.stated = re.compile(rf"(?i:answer)(?:\s+(?i:is))?\s*[:\-]?\s*[*(\[]*{letter}(?![A-Za-z0-9])")

    def letter(self, text: str) -> str | None:
        """The chosen option letter of an answer text, or None."""
        found = self.leading.search(text) or self.stated.search(text)
        return found.group(1) if found else None

    @staticmethod
    def normalize(text: str) -> str:
        return re.sub(r"\s+", " ", text.strip().lower())

    def text_match(self, text: str, gold: str) -> bool:
        answer = self.normalize(text)
        for alternative in (self.normalize(a) for a in gold.split("|")):
            if not alternative:
                continue
            if self.cfg.open_match == "exact":
                if answer.rstrip(".! ") == alternative:
                    return True
            elif re.search(rf"(?<!\w){re.escape(alternative)}(?!\w)", answer):
                return True
        return False

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]``, gold and variant columns ``[N]`` -> rewards ``[N]`` in {1.0, 0.0, None}."""
        cfg = self.cfg
        golds = column(kwargs, cfg.column, len(completions), self.registry_name)
        variants = column(kwargs, cfg.variant_column, len(completions), self.registry_name)
        rewards: list[float | None] = []
        for i, (completion, gold, variant) in enumerate(zip(completions, golds, variants)):
            if gold is None:
                rewards.append(None)
                continue
            text = answer_text(completion, cfg.strip_think)
            if variant == cfg.anchor_value:
                rewards.append(float(self.letter(text) == str(gold).strip().upper()))
            elif variant == cfg.open_value:
                rewards.append(float(self.text_match(text, str(gold))))
            else:
                raise ValueError(
                    f"reward 'choice_or_text': completion {i} has {cfg.variant_column}={variant!r}; "
                    f"expected {cfg.anchor_value!r} or {cfg.open_value!r}"
                )
        return rewards
