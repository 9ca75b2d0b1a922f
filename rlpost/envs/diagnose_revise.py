"""The diagnose-revise environment (``data/env=diagnose_revise``): LA-RL, Label-Aware Reflective RL (seed 000 #19).

"A single backbone first predicts an extraction, diagnoses task-specific error labels, and then revises its
output conditioned on the diagnosis ... two GRPO stages that reward final extraction quality, format validity,
and first-pass correctness, without a process reward model." One episode is three policy turns of one
conversation, the same episode in training and at inference (held-out evaluation runs it too)::

    user       the row's prompt (exactly the single-turn GRPO prompt)
    assistant  a_1  predict: an answer                           first = last_number(a_1)
    user       DIAGNOSE, listing the task's labels
    assistant  a_2  diagnose: "DIAGNOSIS: <label>, <label>"     labels, valid = parse_diagnosis(a_2)
    user       REVISE
    assistant  a_3  revise: the final answer                     final = last_number(a_3)

    R = w_final * 1[final == gold] + w_first * 1[first == gold] + w_format * 1[format valid]
    format valid = a_1 and a_3 each hold a number, and a_2 parses to known labels (``parse_diagnosis``)

``w_first`` is paid at the predict turn and the rest at the revise turn (the runner sums them). All three turns
are trained by GRPO on R over the G episodes of a row (trajectory-level advantage, rlpost/envs/base.py): the
diagnosis is trained, by the outcome only. The revision is never distilled into the first pass: no turn is
replayed under another prompt, and the first pass learns from ``w_first`` alone.

Choices where the abstract is silent (config fields where free):
- Task: the abstract's is information extraction; the CPU task is reasoning-gym ``basic_arithmetic`` with
  arithmetic error labels (``labels``: correct, wrong_operation, arithmetic_slip, sign_error, missing_answer).
  Any task whose gold is a number works; another label set is a config list.
- Answers are the turn's last number (``rlpost.rewards.math_answer.last_number``), equal to 1e-6 relative.
- The diagnosis is read after the last ``DIAGNOSIS:`` (any case), or from the whole turn without one; it is
  split on commas, semicolons, "and" and new lines; each item, lower-cased with spaces and hyphens as ``_``
  and trailing punctuation dropped, must be a label. It is valid with at least one item, every item a label,
  and ``ok_label`` (the "no error" label) alone when it is present. Its labels are never checked against the
  gold: no annotation model, no process reward.
- Weights: ``w_final`` 1.0, ``w_first`` 0.5, ``w_format`` 0.2. With ``w_first + w_format < w_final``, an
  episode scores >= ``w_final`` exactly when its final answer is right, so ``eval/accuracy`` (threshold 1.0 on
  the env term) is the final answer's accuracy; ``eval/env/first_correct`` is the first pass's.
- A turn cut at the token cap ends the episode with what it earned (no final answer: final and format 0).
- Out of scope: the cold-start SFT on diagnoses labelled by an annotation model, and the second GRPO stage
  (the abstract does not say what differs between the stages; a second run with other weights is one).

Logged per episode (``metric_names``: ``env/<key>`` in training, ``eval/env/<key>`` held out): ``first_correct``,
``final_correct``, ``format_valid``, ``diagnosis_valid``, ``changed`` (the final answer differs from the first),
and ``label/<label>`` (the diagnosis names that label).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.core.schema import Range
from rlpost.envs.base import ENVS, Environment, Message, StepResult, row_messages
from rlpost.rewards.math_answer import gold_number, last_number

LABELS = ["correct", "wrong_operation", "arithmetic_slip", "sign_error", "missing_answer"]
DIAGNOSE = (
    "Diagnose your answer. Which of these labels apply: {labels}? "
    "Reply with one line: DIAGNOSIS: <labels, comma-separated>."
)
REVISE = "Now revise your answer according to your diagnosis. Give only the final answer."
PREFIX = re.compile(r"diagnosis\s*:", re.IGNORECASE)
SPLIT = re.compile(r"[,;\n]|\band\b", re.IGNORECASE)


@dataclass(frozen=True)
class DiagnoseReviseConfig(Environment.Config):
    """The episode limits, the label set, the two turns the environment says, and the reward weights."""

    max_turns: Annotated[int, Range(ge=3)] = 3  # predict, diagnose, revise
    max_total_tokens: Annotated[int, Range(ge=2)] = 512  # prompt + three turns + two instructions
    labels: list[str] = field(default_factory=lambda: list(LABELS))  # the task's error labels
    ok_label: str | None = "correct"  # the "no error" label, valid only alone (null: none)
    diagnose: str = DIAGNOSE  # the diagnose turn's instruction; {labels}
    revise: str = REVISE  # the revise turn's instruction
    w_final: Annotated[float, Range(ge=0)] = 1.0  # weight of the final answer's correctness
    w_first: Annotated[float, Range(ge=0)] = 0.5  # weight of the first pass's correctness
    w_format: Annotated[float, Range(ge=0)] = 0.2  # weight of format validity (answers and diagnosis parse)

    def __post_init__(self):
        names = [normalize(label) for label in self.labels]
        if not names or len(set(names)) != len(names) or not all(names):
            raise ValueError(f"labels must be distinct, non-empty names, got {self.labels}")
        if self.ok_label is not None and normalize(self.ok_label) not in names:
            raise ValueError(f"ok_label={self.ok_label!r} is not one of labels ({', '.join(names)})")
        if "{labels}" not in self.diagnose:
            raise ValueError("diagnose must contain {labels} (where the label set is listed)")


def normalize(item: str) -> str:
    """``" Arithmetic slip."`` -> ``"arithmetic_slip"``."""
    return re.sub(r"[\s\-]+", "_", item.strip().strip(".!*`'\"").strip().lower())


def parse_diagnosis(text: str, labels: list[str], ok_label: str | None) -> tuple[list[str], bool]:
    """The known labels ``text`` names (in order, once each) and whether it is a valid diagnosis (docstring)."""
    found = PREFIX.split(text)
    body = found[-1]
    items = [normalize(x) for x in SPLIT.split(body)]
    items = [x for x in items if x]
    known = [normalize(label) for label in labels]
    named = list(dict.fromkeys(x for x in items if x in known))
    valid = bool(items) and all(x in known for x in items)
    if ok_label is not None and normalize(ok_label) in named and len(named) > 1:
        valid = False  # "no error" and an error at once
    return named, valid


def episode_reward(first_ok: bool, final_ok: bool, format_ok: bool, cfg: DiagnoseReviseConfig) -> float:
    """``w_final * final + w_first * first + w_format * format`` (0/1 indicators)."""
    return cfg.w_final * final_ok + cfg.w_first * first_ok + cfg.w_format * format_ok


@ENVS.register("diagnose_revise")
class DiagnoseRevise(Environment):
    """LA-RL: predict, diagnose with the task's error labels, revise; R = final + first-pass + format terms."""

    verifiable = True  # the reward checks the answers against the row's gold
    seed = "seed 000 #19"

    Config = DiagnoseReviseConfig
    cfg: DiagnoseReviseConfig

    def __init__(self, cfg: DiagnoseReviseConfig):
        super().__init__(cfg)
        self.gold: float | None = None
        self.first: float | None = None
        self.diagnosis_ok = False
        self.turn = 0  # policy turns answered so far

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        self.gold = gold_number(row.get("answer"))
        if self.gold is None:
            raise ValueError(f"diagnose_revise needs a numeric answer column, got {row.get('answer')!r}")
        self.first, self.diagnosis_ok, self.turn = None, False, 0
        return row_messages(row)

    def right(self, answer: float | None) -> bool:
        return answer is not None and self.gold is not None and math.isclose(answer, self.gold, rel_tol=1e-6)

    def step(self, message: str) -> StepResult:
        cfg = self.cfg
        self.turn += 1
        turn = self.turn
        if turn == 1:  # predict
            self.first = last_number(message)
            ok = self.right(self.first)
            ask = cfg.diagnose.format(labels=", ".join(cfg.labels))
            return StepResult([{"role": "user", "content": ask}], reward=cfg.w_first * ok, info={"first_correct": ok})
        if turn == 2:  # diagnose
            named, self.diagnosis_ok = parse_diagnosis(message, cfg.labels, cfg.ok_label)
            info: dict[str, Any] = {"diagnosis_valid": self.diagnosis_ok}
            info.update({f"label/{normalize(label)}": normalize(label) in named for label in cfg.labels})
            return StepResult([{"role": "user", "content": cfg.revise}], info=info)
        final = last_number(message)  # revise
        format_ok = self.first is not None and final is not None and self.diagnosis_ok
        reward = episode_reward(False, self.right(final), format_ok, cfg)  # w_first was paid at turn 1
        changed = final is not None and (self.first is None or not math.isclose(final, self.first))
        info = {"final_correct": self.right(final), "format_valid": format_ok, "changed": changed}
        return StepResult(reward=reward, done=True, info=info)

    def metric_names(self) -> list[str]:
        keys = ["first_correct", "final_correct", "format_valid", "diagnosis_valid", "changed"]
        return keys + [f"label/{normalize(label)}" for label in self.cfg.labels]

    def episode_metrics(self, infos: list[dict[str, Any]]) -> dict[str, float]:
        """Each metric summed over the episode's turns (each key is set on one turn)."""
        return {k: float(sum(float(info.get(k, 0.0)) for info in infos)) for k in self.metric_names()}

    def describe(self) -> str:
        cfg = self.cfg
        return (
            f"diagnose_revise: predict, diagnose with labels ({', '.join(cfg.labels)}), revise; reward "
            f"{cfg.w_final:g} x final correct + {cfg.w_first:g} x first-pass correct + {cfg.w_format:g} x format valid"
        )
