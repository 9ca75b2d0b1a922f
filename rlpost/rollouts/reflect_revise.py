"""reflect_revise: LA-RL's predict -> diagnose -> revise (seed 000 #19), on the shared
conditioned-rollout mechanism (conditioned.py).

"A single backbone first predicts an extraction, diagnoses task-specific error labels, and then
revises its output conditioned on the diagnosis": for the first k natural rollouts of a group, the
policy itself writes a diagnosis of its attempt against the task's error ``labels`` (a first
conditioned generation, not trained), then a revision conditioned on (x, attempt, diagnosis); the
revision joins the group under the original prompt x, so the first-pass policy learns from it.

Choices where the abstract is silent: the labels are a config list (for arithmetic: wrong
operation, arithmetic slip, extra text, no final answer, correct); the diagnosis is free text
sampled like any rollout, cut to ``max_attempt_chars`` and placed in the revision turn; the
diagnosis tokens are not trained (LA-RL's cold-start SFT and its separate diagnosis reward are out
of scope); the revision is always kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlpost.rewards.base import completion_text
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts
from rlpost.rollouts.conditioned import ConditionedConfig, ConditionedRollout, Request, revise_prompt

LABELS = ["wrong operation", "arithmetic slip", "extra text", "no final answer", "correct"]
DIAGNOSE = "Diagnose your response above. Which of these labels apply: {labels}? Answer with the labels only."
REVISE = "Diagnosis of your response: {diagnosis}\nRevise your response to fix the diagnosed errors."


@ROLLOUTS.register("reflect_revise")
class ReflectRevise(ConditionedRollout):
    """LA-RL: the policy diagnoses its attempt with error labels, then revises; the revision is trained under x."""

    @dataclass(frozen=True)
    class Config(ConditionedConfig):
        labels: list[str] = field(default_factory=lambda: list(LABELS))  # task-specific error labels
        diagnose: str = DIAGNOSE  # the diagnosis turn; {labels}
        revise: str = REVISE  # the revision turn; {diagnosis}

        def __post_init__(self):
            super().__post_init__()
            if not self.labels or "{labels}" not in self.diagnose or "{diagnosis}" not in self.revise:
                raise ValueError("need labels, a diagnose text with {labels} and a revise text with {diagnosis}")

    def conditions(self, prompts: list, ctx: RolloutContext, out: Rollouts, natural: list[list[int]]) -> list[Request]:
        sources = [(rows, rows[j % len(rows)]) for rows in natural for j in range(self.cfg.refine_per_group)]
        ask = self.cfg.diagnose.format(labels=", ".join(self.cfg.labels))
        diagnoses = ctx.generate(
            [revise_prompt(prompts[i], self.attempt(out, i), ask) for _, i in sources], "diagnosis"
        )
        requests = []
        for (rows, i), completion in zip(sources, diagnoses.completions):
            diagnosis = completion_text(completion)[: self.cfg.max_attempt_chars].strip() or "(none)"
            note = self.cfg.revise.format(diagnosis=diagnosis)
            group = range(rows[0], rows[0] + ctx.num_generations)
            requests.append(Request(group, revise_prompt(prompts[i], self.attempt(out, i), note), i, note))
        labelled = sum(any(label.lower() in r.note.lower() for label in self.cfg.labels) for r in requests)
        ctx.log("reflect_revise/diagnosis_with_label_frac", labelled / max(len(requests), 1))
        return requests
