"""``chrf`` (seed 000 #25, #26): sacrebleu sentence chrF of the completion's answer against a reference, / 100::

    chrf = sacrebleu sentence chrF / 100   (char n-grams 1..char_order, word n-grams 1..word_order, F_beta)

Choices where the abstracts are silent:
- The answer is the text after a ``</think>`` trace (``strip_think: true``): the MT seeds score the
  translation, not the reasoning before it.
- Sentence-level (one score per completion: GRPO needs per-sample rewards) with sacrebleu's defaults
  (char 6, word 0, beta 2; word_order 2 is chrF++). A list-valued reference column is several
  references; a ``None`` reference makes the sample unscorable (``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError, Reward, answers_and_references


@REWARDS.register("chrf")
class ChrF(Reward):
    """Sentence chrF (chrF++ with word_order 2) of the answer against the reference, in [0, 1]."""

    seed = "seed 000 #25, seed 000 #26"

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the reference (a string or a list of strings)
        char_order: Annotated[int, Range(ge=1)] = 6  # character n-gram orders 1..char_order
        word_order: Annotated[int, Range(ge=0)] = 0  # word n-gram orders 1..word_order (2 = chrF++)
        beta: Annotated[float, Range(gt=0)] = 2.0  # recall weight of the F-score
        lowercase: bool = False  # compare case-insensitively
        whitespace: bool = False  # keep whitespace in the character n-grams
        strip_think: bool = True  # score only the text after </think>

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        from sacrebleu.metrics import CHRF

        c = self.cfg
        if c.char_order < 1 or c.word_order < 0 or c.beta <= 0:
            raise ParamError("char_order", f"chrf needs char_order >= 1, word_order >= 0, beta > 0; got {c}")
        self.scorer = CHRF(c.char_order, c.word_order, c.beta, c.lowercase, c.whitespace)  # bad params fail here

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> rewards ``[N]`` in [0, 1] (None without a reference)."""
        return [
            None if item is None else self.scorer.sentence_score(item[0], item[1]).score / 100.0
            for item in answers_and_references(self, completions, kwargs)
        ]
