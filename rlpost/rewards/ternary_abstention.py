"""ternary_abstention: +1 correct, 0 abstained, -1 wrong (the static ternary reward of seed 004 #7).

The reward TIAR starts from (``algorithm/advantage=tiar`` re-weights the advantage of its abstentions
per group). An answer is an abstention when the answer text matches one of ``abstain_patterns``
(case-insensitive regexes, searched anywhere); otherwise it is correct or wrong by ``match``:
``last_number`` (math_answer's numeric check) or ``exact`` (exact_match's normalized equality).

Unanswerable questions: a row whose ``unanswerable_column`` is true (true / yes / 1) has no gold; there
abstaining is the right answer and scores ``correct``, and any answer scores ``wrong``::

    answerable row:   correct | abstain | wrong      (gold checked)
    unanswerable row: correct if it abstains, else wrong

The term declares abstention (``abstention()``: per sample, abstained and should have abstained), so
held-out evaluation reports abstention precision, recall and F1 (rlpost/evaluation/abstention.py), and
its score range ``[wrong, correct]``.

Choices where the abstract is silent:
- Abstention wins over an answer in the same text ("I don't know, maybe 5" abstains): hedging is
  the behaviour abstention learning rewards, and a pattern list is the only offline detector.
- The default patterns are plain English refusals of knowledge; the values default to 1 / 0 / -1,
  the usual ternary scheme (truthful abstention between being right and being wrong).
- A ``None`` gold on an answerable row makes the sample unscorable (``None``), as in the other
  verifiable rewards. A batch without the ``unanswerable_column`` column has only answerable rows
  (so reasoning-gym tasks work unchanged); set ``unanswerable_column: null`` to ignore such a column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError, Reward, column
from rlpost.rewards.math_answer import gold_number, last_number

TRUE = {"true", "yes", "1", "y"}


def is_true(value: Any) -> bool:
    """A data column's truth value: True, 1, or the text true / yes / y / 1 (any case)."""
    return value is True or (not isinstance(value, bool) and str(value).strip().lower() in TRUE)


ABSTAIN = [
    r"\bI (?:do not|don't|dont) know\b",
    r"\bI(?:'m| am) not sure\b",
    r"\bI (?:cannot|can't|can not) (?:answer|determine|say)\b",
    r"\bunanswerable\b",
    r"\bnot enough information\b",
]


@REWARDS.register("ternary_abstention")
class TernaryAbstention(Reward):
    """Ternary reward: correct / abstained / wrong against a gold column (abstention learning)."""

    verifiable = True  # eval/accuracy's default criterion (rlpost/scoring/correctness.py)

    seed = "seed 004 #7"

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the gold answer
        match: Literal["last_number", "exact"] = "last_number"  # how an answer is checked against the gold
        abstain_patterns: list[str] = field(default_factory=lambda: list(ABSTAIN))  # regexes of an abstention
        correct: Annotated[float, Range()] = 1.0  # reward of a correct answer
        abstain: Annotated[float, Range()] = 0.0  # reward of an abstention
        wrong: Annotated[float, Range()] = -1.0  # reward of a wrong answer
        strip_think: bool = True  # score only the text after </think>
        tolerance: Annotated[float, Range(ge=0)] = 1e-9  # relative tolerance of the numeric comparison (last_number)
        unanswerable_column: str | None = "unanswerable"  # data column, true for a row with no answer; null = none

        def __post_init__(self) -> None:
            if not (self.wrong < self.abstain < self.correct):
                raise ValueError(f"need wrong < abstain < correct, got {self.wrong}, {self.abstain}, {self.correct}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        try:
            self.patterns = [re.compile(p, re.IGNORECASE) for p in cfg.abstain_patterns]
        except re.error as err:
            raise ParamError("abstain_patterns", f"bad regex: {err}") from None

    def abstains(self, text: str) -> bool:
        return any(p.search(text) for p in self.patterns)

    def correct(self, text: str, gold: Any) -> bool | None:
        if self.cfg.match == "exact":
            norm = lambda s: re.sub(r"\s+", " ", s.strip().lower())  # noqa: E731
            return norm(text) == norm(str(gold))
        g = gold_number(gold)
        if g is None:
            return None
        p = last_number(text)
        return p is not None and abs(p - g) <= self.cfg.tolerance * max(1.0, abs(g))

    def unanswerable(self, kwargs: dict[str, Any], n: int) -> list[bool]:
        """``[N]``: the row has no answer (its ``unanswerable_column`` is true); all False without that column."""
        name = self.cfg.unanswerable_column
        if name is None or name not in kwargs:
            return [False] * n
        return [is_true(v) for v in column(kwargs, name, n, self.registry_name)]

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]``, the gold column ``[N]`` and ``unanswerable_column`` ``[N]`` -> rewards ``[N]`` in
        {correct, abstain, wrong, None}."""
        n = len(completions)
        golds = column(kwargs, self.cfg.column, n, self.registry_name)
        out: list[float | None] = []
        for completion, gold, no_answer in zip(completions, golds, self.unanswerable(kwargs, n)):
            text = answer_text(completion, self.cfg.strip_think)
            if no_answer:
                out.append(self.cfg.correct if self.abstains(text) else self.cfg.wrong)
                continue
            verdict = None if gold is None else self.correct(text, gold)
            if verdict is None:
                out.append(None)
            elif self.abstains(text):
                out.append(self.cfg.abstain)
            else:
                out.append(self.cfg.correct if verdict else self.cfg.wrong)
        return out

    def abstention(self, completions: list, **columns: Any) -> list[tuple[bool, bool] | None]:
        """``[N]``: (abstained, the row is unanswerable) per sample: what abstention F1 counts."""
        flags = self.unanswerable(columns, len(completions))
        return [(self.abstains(answer_text(c, self.cfg.strip_think)), u) for c, u in zip(completions, flags)]

    def score_range(self) -> tuple[float, float]:
        return (self.cfg.wrong, self.cfg.correct)
