"""majority_vote: test-time RL's label-free reward (seed 000 #5, the TTRL baseline it starts from).

"Test-time RL methods derive [a reward] from the model's own roll-outs, rewarding those that match
the majority vote over N sampled answers" (seed 000 #5). Per group of G completions::

    y_hat = mode{a_j : a_j parsable}        r_i = 1[a_i == y_hat]

Choices where the abstract is silent:
- The answer a_i is read with ``answer`` (group.py ``extract_answer``: last number by default, or
  ``\\boxed{}``, or the whole text), after ``</think>`` when ``strip_think``.
- A completion with no parsable answer has no vote and gets 0; a group with no parsable answer
  gets 0 everywhere (no pseudo-label).
- Ties (``ties``): ``first`` takes the tied answer that appears first in the group (Python's
  ``Counter.most_common`` order, TTRL's reading); ``all`` rewards every tied answer; ``none``
  gives the group no pseudo-label (all 0).
- ``min_share``: the mode must hold at least this share of the group's G completions, else no
  label (0 = always vote; TTRL has no such threshold).
- ``column`` (optional, e.g. ``answer``): a gold column used only for the logged
  ``label_accuracy`` (pseudo-label == gold), never for the reward: the run stays label-free.

Logged per step (group.py): ``majority_share`` (mode count / G), ``labelled`` (groups with a
pseudo-label), ``label_accuracy`` (when ``column`` is set).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError, column
from rlpost.rewards.group import ANSWER_CHOICES, GroupReward, extract_answer
from rlpost.rewards.math_answer import gold_number


def gold_answer(gold: Any, how: str) -> str | None:
    """A gold value in the canonical form of ``extract_answer`` (for ``label_accuracy`` only)."""
    if gold is None:
        return None
    if how == "last_number":
        value = gold_number(gold)
        return None if value is None else extract_answer(repr(value), how)
    return extract_answer(str(gold) if how == "text" else f"\\boxed{{{gold}}}", how)


@REWARDS.register("majority_vote")
class MajorityVote(GroupReward):
    """1 for completions whose answer is the group's most common answer, else 0 (label-free)."""

    @dataclass(frozen=True)
    class Config:
        answer: Literal["last_number", "boxed", "text"] = "last_number"  # how an answer is read
        strip_think: bool = True  # read the answer after </think> only
        ties: Literal["first", "all", "none"] = "first"  # tied modes: first seen | all rewarded | no label
        min_share: Annotated[float, Range(ge=0, le=1)] = 0.0  # the mode needs count / G >= this, else no label
        column: str | None = None  # gold column for the logged label_accuracy only (null: not logged)

    def __init__(self, cfg: Config):
        if cfg.answer not in ANSWER_CHOICES:
            raise ParamError("answer", f"{cfg.answer!r}; choices: {', '.join(ANSWER_CHOICES)}")
        if cfg.ties not in ("first", "all", "none"):
            raise ParamError("ties", f"{cfg.ties!r}; choices: first, all, none")
        if not 0.0 <= cfg.min_share <= 1.0:
            raise ParamError("min_share", f"must be in [0, 1], got {cfg.min_share}")
        super().__init__(cfg)

    def answers(self, completions: list) -> list[str | None]:
        return [extract_answer(answer_text(c, self.cfg.strip_think), self.cfg.answer) for c in completions]

    def labels(self, answers: list[str | None]) -> set[str]:
        """The pseudo-label(s) of a group's answers ``[G]``: empty when there is none."""
        counts = Counter(a for a in answers if a is not None)  # insertion order = first appearance
        if not counts:
            return set()
        top = max(counts.values())
        if top < self.cfg.min_share * len(answers):
            return set()
        tied = [a for a, c in counts.items() if c == top]
        if len(tied) > 1 and self.cfg.ties != "all":
            return {tied[0]} if self.cfg.ties == "first" else set()
        return set(tied)

    def score_group(self, prompts: list, completions: list, rows: dict[str, list]) -> tuple[list, dict[str, float]]:
        """``completions [G]`` -> rewards ``[G]`` in {0, 1}."""
        answers = self.answers(completions)
        labels = self.labels(answers)
        rewards = [float(a is not None and a in labels) for a in answers]
        metrics = {"majority_share": sum(rewards) / len(rewards) / max(1, len(labels)), "labelled": float(bool(labels))}
        if self.cfg.column and labels:
            gold = gold_answer(column(rows, self.cfg.column, len(answers), "majority_vote")[0], self.cfg.answer)
            metrics["label_accuracy"] = float(gold in labels)
        return rewards, metrics
