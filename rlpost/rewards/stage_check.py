"""stage_check: each stage of a staged completion scored on its OWN text, one reward column per stage.

StructPO (seed 000 #10) decouples "local stage quality" from "global coherence". The local quality of a stage
must be read from that stage: here each stage ``<tag>...</tag>`` is checked by a rule against a row column, and
each stage is its own reward column ``stage_check/<tag>`` (rlpost/scoring/columns.py), so
``algorithm/advantage=segments`` can route a stage's own score to that stage's tokens
(``local: [{stage: "<plan>", term: stage_check/plan}, ...]``). The checks (``stages[i].check``), on the stage's
text ``s`` and the row's column ``c`` (``data=staged_arith`` has one column per stage):

    steps     LCS(ops(c), ops(s)) / |ops(c)|            the operations, in order: ops(x) = the (operator,
              operand) pairs written in x, "+ 5" or "add 5", "* 3" or "multiply by 3", "- 4" or "subtract 4"
    results   |numbers(c) ∩ results(s)| / |numbers(c)|  the intermediate results: results(s) = each number
              written right after "=" ("12 + 5 = 17" -> 17), a multiset intersection
    number    1 if s is one number equal to c, else 0   the final answer, exactly (" 47 " yes, "47 apples" no)

Choices where the abstract is silent:
- A stage's text is the content of its last complete ``<tag>...</tag>`` block (rewards/base.py ``tag_content``);
  without one the stage scores 0 (no stage, no stage quality), not None, so a group's completions that lack the
  stage pull its mean down and those that have a good one get a positive local advantage.
- ``results`` counts only numbers after "=", so copying the question's operands earns nothing; it ignores the
  order (a right result in the wrong line is still a right intermediate).
- A row whose column is None, or has nothing to check (no operation, no number), is unscorable (None).
- Column c of the term has weight ``term weight * w_c / sum_k w_k`` (``stages[i].weight``), as for a rubric's
  criteria; called as one function (not split) the term is the weighted mean of its stages.
- Not verifiable: eval/accuracy's criterion stays the whole-completion ``math_answer``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rlpost.core.chat import completion_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, Reward, column, tag_content
from rlpost.rewards.math_answer import NUMBER, gold_number

OPS = {
    "+": "+", "plus": "+", "add": "+",
    "-": "-", "minus": "-", "subtract": "-",
    "*": "*", "×": "*", "times": "*", "multiply by": "*", "multiplied by": "*",
}  # fmt: skip
WORD_OPS = "|".join(sorted((k for k in OPS if k[0].isalpha()), key=len, reverse=True))
STEP = re.compile(rf"([+\-*×]|\b(?:{WORD_OPS})\b)\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
RESULT = re.compile(r"=\s*(" + NUMBER.pattern + ")")


def ops(text: str) -> list[tuple[str, float]]:
    """The (operator, operand) pairs written in ``text``: ``"+ 5, then multiply by 3"`` -> [("+", 5), ("*", 3)]."""
    return [(OPS[m.group(1).lower()], float(m.group(2))) for m in STEP.finditer(text)]


def results(text: str) -> list[float]:
    """Each number written right after "=": ``"12 + 5 = 17; 17 * 3 = 51"`` -> [17, 51]."""
    return [float(m.group(1).replace(",", "")) for m in RESULT.finditer(text)]


def lcs(a: list, b: list) -> int:
    """Length of the longest common subsequence of ``a`` and ``b``."""
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0  # row[j - 1] of the previous pass
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], (prev + 1 if x == y else max(row[j], row[j - 1]))
    return row[-1]


def check_steps(stage: str, gold: Any) -> float | None:
    want = ops(str(gold))
    return lcs(want, ops(stage)) / len(want) if want else None


def check_results(stage: str, gold: Any) -> float | None:
    want = Counter(float(n.replace(",", "")) for n in NUMBER.findall(str(gold)))
    found = Counter(results(stage))
    return sum((want & found).values()) / sum(want.values()) if want else None


def check_number(stage: str, gold: Any) -> float | None:
    want = gold_number(gold)
    if want is None:
        return None
    text = stage.strip()
    return float(NUMBER.fullmatch(text) is not None and float(text.replace(",", "")) == want)


CHECKS = {"steps": check_steps, "results": check_results, "number": check_number}


@dataclass(frozen=True)
class Stage:
    tag: str  # the stage's tag: its text is the content of its last <tag>...</tag> block
    check: Literal["steps", "results", "number"]  # the rule (module docstring)
    column: str  # the row column the stage is checked against
    weight: Annotated[float, Range(gt=0)] = 1.0  # its share of the term's weight


def staged_arith_stages() -> list[Stage]:
    """data=staged_arith's three stages and the columns that check them."""
    return [
        Stage("plan", "steps", "plan"),
        Stage("compute", "results", "intermediates"),
        Stage("answer", "number", "answer"),
    ]


@REWARDS.register("stage_check")
class StageCheck(Reward):
    """One column per stage: the stage's own text checked by a rule against a row column, in [0, 1]."""

    seed = "seed 000 #10"

    @dataclass(frozen=True)
    class Config:
        stages: list[Stage] = field(default_factory=staged_arith_stages)  # (tag, check, column, weight) per stage

        def __post_init__(self) -> None:
            tags = [s.tag for s in self.stages]
            if not tags:
                raise ValueError("stages must name at least one stage")
            for tag in tags:
                if not re.fullmatch(r"[\w.:-]+", tag):
                    raise ValueError(f"stage tag {tag!r} is not a plain tag name (letters, digits, _ . : -)")
            repeated = sorted({t for t in tags if tags.count(t) > 1})
            if repeated:
                raise ValueError(f"stage tags must be unique (each is a reward column); repeated: {repeated}")

    def score_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def data_columns(self) -> list[tuple[str, str]]:
        return [(f"stages[{i}].column", s.column) for i, s in enumerate(self.cfg.stages)]

    def output_columns(self) -> list[tuple[str, float]]:
        return [(s.tag, s.weight) for s in self.cfg.stages]

    def column_scores(self, prompts: list, completions: list, **kwargs: Any) -> list[list[float | None]]:
        """``completions [N]`` and each stage's column ``[N]`` -> ``[N][C]`` stage scores in [0, 1] (None: no gold)."""
        texts = [completion_text(c) for c in completions]
        table: list[list[float | None]] = [[] for _ in texts]
        for stage in self.cfg.stages:
            golds = column(kwargs, stage.column, len(texts), self.registry_name)
            check = CHECKS[stage.check]
            for i, (text, gold) in enumerate(zip(texts, golds)):
                own = tag_content(text, stage.tag) or ""  # no complete block: nothing to credit, 0
                table[i].append(None if gold is None else check(own, gold))
        return table

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """Unsplit: the weighted mean of the stages' scores ``[N]`` (None where no stage could be scored)."""
        weights = [s.weight for s in self.cfg.stages]
        out: list[float | None] = []
        for row in self.column_scores(prompts, completions, **kwargs):
            pairs = [(w, v) for w, v in zip(weights, row) if v is not None]
            total = sum(w for w, _ in pairs)
            out.append(sum(w * v for w, v in pairs) / total if total > 0 else None)
        return out
