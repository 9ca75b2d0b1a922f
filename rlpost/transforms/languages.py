"""languages: each held-out question once per response language, for per-language accuracy (seed 004 #9, LRPO).

LRPO's claim is multilingual: rollouts "in multiple languages" make the policy better across them. The run's own
held-out split asks every question in its plain form only, so that claim is never measured. This transform
repeats each row of the chosen split once per language, the prompt ending in the instruction LRPO's rollouts
train under (``language_routed``'s defaults: "Answer in <language>." after a blank line at the end of the user
message), with the language in a ``language`` column::

    row r, languages L_1..L_K  ->  K rows: prompt_r + "\\n\\nAnswer in L_k.", language = L_k   (question-major)

so ``eval.group_by=language`` reports ``eval/accuracy/<language>``, and ``eval/accuracy`` is their mean.

Choices where the abstract is silent:
- Only the eval split is rewritten by default (``apply_to: eval``): LRPO's router picks the training languages
  itself; ``apply_to: both`` also spreads a plain GRPO run's training prompts over every language (a baseline
  that sees the languages without a router).
- Rows are question-major (a question's K languages are consecutive), so ``eval.size = K * q`` scores q whole
  questions in every language; the answer stays the row's (a number is the same in every language, which is
  why the reward must be language-agnostic, as for LRPO's training).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlpost.transforms.base import TRANSFORMS, Split, Transform, add_note


@TRANSFORMS.register("languages")
class Languages(Transform):
    """Each row of the chosen split once per language, asked to answer in it; the language in a column."""

    seed = "seed 004 #9"

    @dataclass(frozen=True)
    class Config:
        languages: list[str] = field(
            default_factory=lambda: ["English", "French", "Spanish", "German", "Chinese"]
        )  # one row per language (language_routed's arms)
        instruction: str = "Answer in {language}."  # added after the user's message (language_routed's)
        apply_to: Literal["eval", "both"] = "eval"  # the split(s) rewritten (eval: the held-out questions only)
        column: str = "language"  # the row column naming the language (eval.group_by=<column>)

        def __post_init__(self):
            if not self.languages or len(set(self.languages)) != len(self.languages):
                raise ValueError("languages must be a non-empty list of distinct names")
            if "{language}" not in self.instruction:
                raise ValueError("instruction must contain {language}")
            if not self.column or self.column in ("prompt", "answer"):
                raise ValueError(f"column={self.column!r} must name a new row column (not prompt or answer)")

    def __call__(self, rows: list[dict], split: Split) -> list[dict]:
        if split == "train" and self.cfg.apply_to == "eval":
            return rows
        return [
            {
                **row,
                "prompt": add_note(row["prompt"], self.cfg.instruction.format(language=name), "suffix"),
                self.cfg.column: name,
            }
            for row in rows
            for name in self.cfg.languages
        ]
