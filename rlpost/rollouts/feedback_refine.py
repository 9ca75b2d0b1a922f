"""feedback_refine: DITTO's feedback-conditioned improved rollout (seed 004 #16), on the shared
conditioned-rollout mechanism (conditioned.py).

"After each rollout, DITTO receives verbal feedback and generates a feedback-conditioned improved
rollout; both outputs are jointly optimized with GRPO": the first k natural rollouts of a group each
get verbal feedback written for that rollout by a feedback model, the policy writes an improved
response conditioned on (x, attempt, feedback), and it joins the group under the original prompt x.

The feedback model is a frozen text generator (``writer``, rlpost/rewards/rubric_writer.py): a local
model (SmolLM2-135M-Instruct by default; ``writer.model.source=qwen2_5_coder`` writes sharper
feedback) or an OpenAI-compatible endpoint (``writer.backend=openai``). It reads ``instruction``
filled with the task, the rollout and, when ``reference_column`` names a data column, a reference.

Choices where the abstract is silent: the feedback model is separate from the policy and frozen (a
critic that moved with the policy would grade its own drift); greedy decoding of ``max_new_tokens``;
the feedback is cut at its first blank line and to ``max_feedback_chars``; a rollout whose feedback
could not be written (an endpoint error, an empty text) gets no refinement, and its slot a fresh
natural rollout; the refined rollout is always kept; when k exceeds the G - k natural rollouts,
attempts are reused in order. Logged: ``feedback_refine/written_frac`` and ``feedback_chars_mean``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.core.schema import Range
from rlpost.rewards.rubric_writer import build_writer
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, user_text
from rlpost.rollouts.conditioned import ConditionedConfig, ConditionedRollout, Request, revise_prompt

NOTE = "Feedback on your response: {feedback}\nWrite an improved response that takes this feedback into account."
INSTRUCTION = (
    "Read the task and the response below. Give the author short, specific verbal feedback: what is wrong or "
    "missing in this response and how to improve it. Do not rewrite the response.\n\n"
    "Task: {task}\n\nResponse: {response}{reference}"
)


def first_paragraph(text: str, limit: int) -> str:
    """The feedback up to its first blank line, stripped and cut to ``limit`` characters."""
    return text.strip().split("\n\n", 1)[0].strip()[:limit]


@ROLLOUTS.register("feedback_refine")
class FeedbackRefine(ConditionedRollout):
    """DITTO: a feedback model's verbal feedback on each rollout -> an improved rollout, trained under x."""

    @dataclass(frozen=True)
    class Config(ConditionedConfig):
        # the feedback model (rlpost/rewards/rubric_writer.py WriterConfig): backend, model, max_new_tokens, ...
        writer: dict[str, Any] = field(default_factory=lambda: {"backend": "local", "max_new_tokens": 64})
        reference_column: str | None = None  # a data column the feedback model also reads (null: none)
        instruction: str = INSTRUCTION  # the feedback model's prompt; {task} {response} {reference}
        max_feedback_chars: Annotated[int, Range(ge=1)] = 400  # written feedback is cut to this length
        template: str = NOTE  # the user turn after the attempt; {feedback}

        def __post_init__(self):
            super().__post_init__()
            if "{feedback}" not in self.template:
                raise ValueError("template must contain {feedback}")
            missing = [k for k in ("{task}", "{response}") if k not in self.instruction]
            if missing:
                raise ValueError(f"instruction must contain {' and '.join(missing)}")

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.writer = build_writer(cfg.writer)

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        if self.writer.cfg.backend == "local":
            from rlpost.models.loading import check_weights_available

            check_weights_available(self.writer.cfg.model, "algorithm.rollout.writer.model")

    def feedback_prompt(self, row: dict[str, Any], task: str, response: str) -> str:
        reference = ""
        if self.cfg.reference_column:
            if self.cfg.reference_column not in row:
                raise KeyError(f"rollout 'feedback_refine': no data column {self.cfg.reference_column!r}")
            reference = f"\n\nReference: {row[self.cfg.reference_column]}"
        return self.cfg.instruction.format(task=task, response=response, reference=reference)

    def conditions(self, prompts: list, ctx: RolloutContext, out: Rollouts, natural: list[list[int]]) -> list[Request]:
        sources = []  # (group, natural row whose attempt gets feedback)
        for rows in natural:
            group = range(rows[0], rows[0] + ctx.num_generations)
            sources += [(group, rows[j % len(rows)]) for j in range(self.cfg.refine_per_group)]
        asks = [self.feedback_prompt(ctx.rows[i], user_text(prompts[i]), self.attempt(out, i)) for _, i in sources]
        written = [first_paragraph(t, self.cfg.max_feedback_chars) if t else "" for t in self.writer.write(asks)]
        ctx.log("feedback_refine/written_frac", sum(bool(w) for w in written) / max(len(written), 1))
        ctx.log("feedback_refine/feedback_chars_mean", sum(map(len, written)) / max(len(written), 1))
        requests = []
        for (group, i), feedback in zip(sources, written):
            if feedback:
                note = self.cfg.template.format(feedback=feedback)
                requests.append(Request(group, revise_prompt(prompts[i], self.attempt(out, i), note), i, note))
        return requests

    def describe(self) -> str:
        source = self.writer.cfg.endpoint_model if self.writer.cfg.backend == "openai" else "a local model"
        return (
            f"feedback_refine (DITTO): {source} writes verbal feedback on {self.cfg.refine_per_group} rollouts per "
            "group; each feedback-conditioned rewrite joins the group under the original prompt"
        )
