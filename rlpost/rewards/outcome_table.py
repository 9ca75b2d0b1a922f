"""outcome_table: FinSMART's discrete, asymmetric trading reward (seed 000 #15).

The policy states a label (a sentiment call: positive / neutral / negative); the data says what the
market then did, as an outcome bucket (up / flat / down, e.g. written by
``data/transform=market_filter``). The reward is a table lookup::

    r_i = table[label(y_i)][bucket_i]          label(y_i) = the last label word in the answer
    r_i = unparsed                             when the answer names no label
    r_i = None                                 when the row has no outcome (not scored)

Default table (a trading reading of a sentiment call: positive = long, negative = short, neutral =
no position)::

                 up     flat    down
    positive    1.0    -0.5    -2.0
    neutral     0.0     0.5     0.0
    negative   -2.0    -0.5     1.0

Choices where the abstract is silent:
- Asymmetric means a wrong-direction call costs twice what a right one earns (loss aversion: a
  confident wrong signal loses money), and a trade in a flat market pays a small cost. Neutral earns
  0.5 when the market stays flat and 0 when it moves (a missed trade loses nothing). Every value is
  a config field; the table must give every label a value for every bucket.
- ``unparsed`` (-1.0) sits below every neutral cell, so naming no label is never better than
  abstaining with ``neutral``.
- The label is the last whole-word, case-insensitive occurrence of a label or an alias
  (``bullish`` -> positive, ``bearish`` -> negative) in the answer, after ``</think>``: the usual
  "final answer last" reading.
- It is verifiable (the realized outcome is the reference): with ``eval.correct_threshold=0.5`` a
  held-out item is correct when the call was right (a right trade, or neutral in a flat market).
- Logged per call: ``<term>/<label>_frac`` for every label and ``<term>/unparsed_frac``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, Reward, column

DEFAULT_TABLE = {
    "positive": {"up": 1.0, "flat": -0.5, "down": -2.0},
    "neutral": {"up": 0.0, "flat": 0.5, "down": 0.0},
    "negative": {"up": -2.0, "flat": -0.5, "down": 1.0},
}
DEFAULT_ALIASES = {"bullish": "positive", "bearish": "negative"}


@REWARDS.register("outcome_table")
class OutcomeTable(Reward):
    """Table reward: the stated label x the realized outcome bucket read from a data column."""

    verifiable = True  # the realized outcome is the reference (rlpost/scoring/correctness.py)

    seed = "seed 000 #15"

    @dataclass(frozen=True)
    class Config:
        column: str = "outcome"  # dataset column holding the realized outcome bucket
        table: dict[str, dict[str, float]] = field(
            default_factory=lambda: {k: dict(v) for k, v in DEFAULT_TABLE.items()}
        )  # label -> bucket -> reward
        aliases: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ALIASES))  # word -> label
        unparsed: Annotated[float, Range()] = -1.0  # reward of an answer that names no label
        strip_think: bool = True  # read the label after </think>

        def __post_init__(self) -> None:
            if not self.table:
                raise ValueError("table is empty: give label -> bucket -> reward")
            buckets = [sorted(row or {}) for row in self.table.values()]
            if not buckets[0] or any(b != buckets[0] for b in buckets):
                shapes = "; ".join(f"{k}: {', '.join(b) or '(none)'}" for k, b in zip(self.table, buckets))
                raise ValueError(f"table rows must name the same buckets ({shapes})")
            for label, row in self.table.items():
                for bucket, value in row.items():
                    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                        raise ValueError(f"table.{label}.{bucket}={value!r} is not a finite number")
            for word, label in self.aliases.items():
                if label not in self.table:
                    raise ValueError(
                        f"aliases.{word}={label!r} is not a label. Valid choices: {', '.join(self.table)}."
                    )

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        words = {
            **{label.lower(): label for label in cfg.table},
            **{word.lower(): label for word, label in cfg.aliases.items()},
        }
        self.words = words
        alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
        self.regex = re.compile(rf"\b(?:{alternatives})\b", re.IGNORECASE)
        self.buckets = sorted(next(iter(cfg.table.values())))

    def label(self, text: str) -> str | None:
        """The last label (or alias, mapped to its label) named in ``text``; None when there is none."""
        found = self.regex.findall(text)
        return self.words[found[-1].lower()] if found else None

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` and the outcome column ``[N]`` -> rewards ``[N]`` from the table (None: no outcome)."""
        outcomes = column(kwargs, self.cfg.column, len(completions), self.registry_name)
        labels = [self.label(answer_text(c, self.cfg.strip_think)) for c in completions]
        out: list[float | None] = []
        for label, outcome in zip(labels, outcomes):
            if outcome is None or outcome == "":
                out.append(None)
                continue
            bucket = str(outcome)
            if bucket not in self.buckets:
                raise ValueError(
                    f"reward {self.__name__!r}: column {self.cfg.column!r} has {bucket!r}, not a bucket of the table "
                    f"({', '.join(self.buckets)})"
                )
            out.append(self.cfg.unparsed if label is None else float(self.cfg.table[label][bucket]))
        log = kwargs.get("log_metric")
        if callable(log) and labels:
            for name in self.cfg.table:
                log(f"{self.__name__}/{name}_frac", sum(lab == name for lab in labels) / len(labels))
            log(f"{self.__name__}/unparsed_frac", sum(lab is None for lab in labels) / len(labels))
        return out
