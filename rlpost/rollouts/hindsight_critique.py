"""hindsight_critique: HindSearch's hindsight critique from a judge that sees the gold answer
(seed 000 #12), on the shared conditioned-rollout mechanism (conditioned.py).

"After each rollout, a frozen judge writes a short critique of every failed trajectory using the
gold answer": a judge of the judge layer (rlpost/judges/, local model or OpenAI-compatible
endpoint) is asked, with the gold answer, whether each natural rollout is correct; the rollouts it
scores below ``fail_below`` are failed; for up to k of them per group (lowest score first) the
policy writes a second attempt conditioned on (x, the failed attempt, the critique) and that
attempt joins the group under the original prompt x.

Choices where the abstract is silent: rlpost's judges are scorers (a yes/no probability), not
writers, so the critique is ``critique``, a template filled with the judge's verdict and, when
``reveal_gold`` is on, the gold answer (the hindsight the abstract isolates as the source of the
gain); a group with no failed rollout gets no conditioned rollout (its slots are natural);
HindSearch's separate distillation loss is replaced by GRPO on the joined group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.errors import ConfigError
from rlpost.judges.base import ANSWER_FORMAT, build_judge
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, user_text
from rlpost.rollouts.conditioned import ConditionedConfig, ConditionedRollout, Request, revise_prompt
from rlpost.schema import Range

JUDGE_TEMPLATE = (
    "Question: {question}\n\nReference answer (known to be correct): {gold}\n\nResponse: {response}\n\n"
    "Does the response give the same final answer as the reference? {answer_format}"
)
CRITIQUE = (
    "A reviewer who knows the correct answer judged your response wrong (confidence it is right: {score:.2f}). "
    "The correct final answer is {gold}. Write a corrected response."
)


@ROLLOUTS.register("hindsight_critique")
class HindsightCritique(ConditionedRollout):
    """HindSearch: a judge with the gold answer flags failed rollouts; a critique-conditioned retry is trained under x."""

    @dataclass(frozen=True)
    class Config(ConditionedConfig):
        judge: dict[str, Any] = field(
            default_factory=lambda: {"backend": "local"}
        )  # judge backend and its Config (rlpost/judges)
        gold_column: str = "answer"  # data column with the gold answer the judge sees
        # a rollout whose judge score (in [0, 1]) is below this failed: 0 = none, above 1 = all
        fail_below: Annotated[float, Range(ge=0)] = 0.5
        judge_template: str = JUDGE_TEMPLATE  # {question} {gold} {response} {answer_format}
        critique: str = CRITIQUE  # the critique turn; {gold} {score}
        reveal_gold: bool = True  # false: {gold} in the critique reads "(withheld)"

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        try:
            self.judge = build_judge(cfg.judge, "algorithm.rollout.judge")
        except ConfigError as err:
            raise ConfigError(str(err)) from None
        if self.judge.mode != "yes_no":
            raise ConfigError(
                "algorithm.rollout.judge.mode must be yes_no (the judge says whether a rollout is correct)"
            )

    def conditions(self, prompts: list, ctx: RolloutContext, out: Rollouts, natural: list[list[int]]) -> list[Request]:
        col, rows = self.cfg.gold_column, [i for n in natural for i in n]
        if col not in ctx.rows[0]:
            raise KeyError(f"rollout 'hindsight_critique': no data column {col!r} (set algorithm.rollout.gold_column)")
        judge_prompts = [
            self.cfg.judge_template.format(
                question=user_text(prompts[i]),
                gold=ctx.rows[i][col],
                response=self.attempt(out, i),
                answer_format=ANSWER_FORMAT["yes_no"],
            )
            for i in rows
        ]
        scores = dict(zip(rows, self.judge.score(judge_prompts)))
        ctx.log("hindsight_critique/judge_score_mean", _mean([s for s in scores.values() if s is not None]))
        requests = []
        for group_rows in natural:
            failed = sorted(
                (scores[i], i) for i in group_rows if scores[i] is not None and scores[i] < self.cfg.fail_below
            )
            group = range(group_rows[0], group_rows[0] + ctx.num_generations)
            for score, i in failed[: self.cfg.refine_per_group]:
                gold = ctx.rows[i][col] if self.cfg.reveal_gold else "(withheld)"
                note = self.cfg.critique.format(gold=gold, score=score)
                requests.append(Request(group, revise_prompt(prompts[i], self.attempt(out, i), note), i, note))
        ctx.log(
            "hindsight_critique/failed_frac",
            sum(s is not None and s < self.cfg.fail_below for s in scores.values()) / len(rows),
        )
        return requests


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
