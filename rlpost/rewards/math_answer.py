"""math_answer: 1.0 when the completion's final answer equals the gold answer, else 0.0.

The verifiable "math answer check" of METHODS.md section 3. Two ways to read the answer:

- ``last_number`` (default): the last number in the completion, compared numerically with the
  gold. This is DESIGN.md's measured default ("answer = last number, reward = exact correctness"),
  needs no sympy, and cannot be fooled by restating the question: math-verify *evaluates*
  expressions, so for gold ``6`` it accepts the bare completion ``2*3`` (an echo of the prompt
  "What is 2*3?") as correct, which a policy on arithmetic tasks can learn to exploit.
- ``math_verify``: math-verify's ``parse``/``verify`` (LaTeX, fractions, ``\\boxed{}``, sets,
  symbolic equality). When it extracts nothing from the gold or the completion, the sample falls
  back to ``last_number``, so a plain-number answer is never scored lower than in that mode.

Choices where nothing dictated one:
- Numbers: an optional sign, digits with optional thousands commas (``1,234``), an optional
  decimal part. A ``-`` right after a letter, digit or closing bracket is an operator, not a sign,
  so ``3-1`` ends in ``1`` and ``x = -3`` ends in ``-3``.
- The gold is read leniently: surrounding spaces, commas and spaces between digits are dropped
  (``" 1 234 "`` -> 1234) and a non-numeric gold falls back to its last number.
- Equal means ``|pred - gold| <= tolerance * max(1, |gold|)``.
- A gold with no number (or ``None``) makes the sample unscorable: ``None``, which TRL turns into NaN.
- math-verify's timeouts use ``signal.alarm``, which raises off the main thread: ``timeout_s``
  applies on the main thread only; elsewhere (TRL's async reward thread) it runs without one.
- ``strip_think`` (default on) scores only the text after ``</think>``: a trace is not an answer.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.chat import completion_text, strip_think
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, Reward, column

logger = logging.getLogger(__name__)

NUMBER = re.compile(r"(?:(?<![\w)\]])-)?(?<![\d.])\d+(?:,\d{3}(?!\d))*(?:\.\d+)?")


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (``"so 1,200 - 7 = -5.5"`` -> -5.5), or None."""
    found = NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def gold_number(gold: Any) -> float | None:
    """The gold answer as a number: ``42``, ``" 1,234 "``, ``"1 234"``, ``"$-3$"`` -> -3.0."""
    if gold is None or isinstance(gold, bool):
        return None
    if isinstance(gold, (int, float)):
        return float(gold)
    text = re.sub(r"(?<=\d)[,\s]+(?=\d)", "", str(gold).strip())
    try:
        return float(text)
    except ValueError:
        return last_number(text)


@REWARDS.register("math_answer")
class MathAnswer(Reward):
    """Final-answer correctness against a gold column: last number or math-verify."""

    verifiable = True  # eval/accuracy's default criterion (rlpost/scoring/correctness.py)

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the gold answer
        mode: Literal["last_number", "math_verify"] = "last_number"
        strip_think: bool = True  # score only the text after </think>
        tolerance: Annotated[float, Range(ge=0)] = 1e-9  # relative tolerance of the numeric comparison (last_number)
        timeout_s: Annotated[int, Range(ge=1)] = 5  # math-verify timeout per parse/verify, main thread only

    def score_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` and the gold column ``[N]`` -> rewards ``[N]`` in {1.0, 0.0, None}."""
        golds = column(kwargs, self.cfg.column, len(completions), self.registry_name)
        texts = [completion_text(c) for c in completions]
        if self.cfg.strip_think:
            texts = [strip_think(t) for t in texts]
        rewards = [self._score(t, g) for t, g in zip(texts, golds)]
        if callable(kwargs.get("log_extra")):
            name = self.__name__
            kwargs["log_extra"](f"{name}_gold", [str(g) for g in golds])
        return rewards

    def _score(self, text: str, gold: Any) -> float | None:
        if self.cfg.mode == "math_verify":
            verdict = self._math_verify(text, gold)
            if verdict is not None:
                return verdict
        g = gold_number(gold)
        if g is None:
            return None
        p = last_number(text)
        return float(p is not None and abs(p - g) <= self.cfg.tolerance * max(1.0, abs(g)))

    def _math_verify(self, text: str, gold: Any) -> float | None:
        """1.0/0.0 from math-verify, or None when it extracts nothing from either side."""
        from math_verify import parse, verify

        on_main = threading.current_thread() is threading.main_thread()
        timeout = self.cfg.timeout_s if on_main and self.cfg.timeout_s > 0 else None
        if gold is None:
            return None
        gold_parsed = parse(str(gold), parsing_timeout=timeout)
        pred_parsed = parse(text, parsing_timeout=timeout) if gold_parsed else []
        if not gold_parsed or not pred_parsed:
            return None
        return float(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))


__all__ = ["MathAnswer", "gold_number", "last_number"]
