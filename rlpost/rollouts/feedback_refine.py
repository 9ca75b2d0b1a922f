"""feedback_refine: DITTO's feedback-conditioned improved rollout (seed 004 #16), on the shared
conditioned-rollout mechanism (conditioned.py).

"After each rollout, DITTO receives verbal feedback and generates a feedback-conditioned improved
rollout; both outputs are jointly optimized with GRPO": the first k natural rollouts of a group
each get verbal feedback, the policy writes an improved response conditioned on (x, attempt,
feedback), and it joins the group under the original prompt x.

Choices where the abstract is silent: the feedback comes from a data column (``feedback_column``,
per-prompt verbal feedback, e.g. written by a simulator or annotator) or, where the column is
unset or empty, the fixed ``feedback`` text; the refined rollout is always kept; when k exceeds
the G - k natural rollouts, attempts are reused in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts
from rlpost.rollouts.conditioned import ConditionedConfig, ConditionedRollout, Request, revise_prompt

NOTE = "Feedback on your response: {feedback}\nWrite an improved response that takes this feedback into account."


@ROLLOUTS.register("feedback_refine")
class FeedbackRefine(ConditionedRollout):
    """DITTO: verbal feedback on a rollout -> an improved rollout, trained under the original prompt."""

    @dataclass(frozen=True)
    class Config(ConditionedConfig):
        feedback_column: str | None = None  # data column with verbal feedback for the prompt (null: use `feedback`)
        feedback: str = "The response is not good enough yet; make it more accurate and more helpful."  # fixed feedback
        template: str = NOTE  # the user turn after the attempt; {feedback}

        def __post_init__(self):
            super().__post_init__()
            if "{feedback}" not in self.template:
                raise ValueError("template must contain {feedback}")

    def conditions(self, prompts: list, ctx: RolloutContext, out: Rollouts, natural: list[list[int]]) -> list[Request]:
        requests = []
        for rows in natural:
            row: dict[str, Any] = ctx.rows[rows[0]]
            feedback = row.get(self.cfg.feedback_column) if self.cfg.feedback_column else None
            note = self.cfg.template.format(feedback=str(feedback or self.cfg.feedback))
            group = range(rows[0], rows[0] + ctx.num_generations)
            for j in range(self.cfg.refine_per_group):
                source = rows[j % len(rows)]
                requests.append(
                    Request(group, revise_prompt(prompts[source], self.attempt(out, source), note), source, note)
                )
        return requests
