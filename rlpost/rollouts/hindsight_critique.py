"""hindsight_critique: HindSearch's hindsight self-distillation for GRPO (seed 000 #12).

"After each rollout, a frozen judge writes a short critique of every failed trajectory using the gold
answer, and the critique supplies an auxiliary on-policy distillation signal on the student's search
actions." Per group of G rollouts y ~ pi(. | x) of one prompt x (all G are ordinary GRPO rows):

1. failed: y failed when the run's correctness term (``eval.correct_term``, the exact-match style
   reward that ``eval/accuracy`` reads, rlpost/scoring/correctness.py) scores it below ``fail_below``;
2. critique: a frozen writer (rlpost/rewards/rubric_writer.py: a local model, SmolLM2-135M-Instruct by
   default, ``writer.model.source=qwen2_5_coder`` sharper, or an OpenAI-compatible endpoint) reads
   ``instruction`` filled with the question, the failed attempt and, when ``judge_sees_gold`` (the
   abstract's ablation turns it off), the gold answer, and writes a short critique (its first
   paragraph, cut to ``max_critique_chars``). The critique is the writer's text, not a template;
3. teacher context: c = x with ``template`` (filled with the critique) appended to x's user turn; for
   an episode (``data/env``) x is the episode's first messages (the environment's system message and
   question), so the teacher reads the tools' instructions too;
4. distillation (``loss_term``) on the student's OWN tokens: the failed rollout y itself, sampled by the
   student under x, is re-scored by the same policy reading c (the teacher: the policy with hindsight).
   With T completion tokens of micro-batch B::

       teacher_t = log pi_old(y_t | c, y_<t)       [B, T] no-grad forward at scoring time (score_rollouts)
       student_t = log pi_theta(y_t | x, y_<t)    [B, T] the loss's logps (requires grad)
       delta_t   = sg(student_t - teacher_t)      [B, T] sampled-token reverse-KL estimate
       l_t       = w_i * delta_t * student_t      [B, T] w_i = opd_coef on critiqued rows, else 0

   Because y ~ pi(. | x), ``w * delta_t * grad log pi_theta(y_t | x)`` is the on-policy (no importance
   ratio needed) per-token (discount 0) policy gradient of KL(pi(.|x) || pi(.|c)): the tokens of the
   failed attempt that the critique makes less likely (delta > 0, the mistake the critique names) are
   pushed down under x, those it makes likelier pushed up. The term adds to the run's GRPO loss; the
   critiqued rows keep their reward and their place in the group (the GRPO signal is unchanged).

Choices where the abstract is silent: the critique writer is separate from the policy and frozen
(greedy, ``writer.max_new_tokens``); without the gold it still knows the attempt failed (failure is
the reward's verdict, not the judge's); a failed rollout whose critique could not be written (endpoint
error, empty text) gets no term; at most ``critiques_per_group`` failed rollouts per group are critiqued
(the first in row order: the reward is binary, there is no "most wrong"; the writer's cost is the cap's
reason); the teacher is the policy that sampled the batch (pi_old; the same as pi_theta at
num_iterations 1) rather than a separate frozen copy (the abstract's "self-distillation"); the critique
may state the gold answer (the writer is asked not to; ``gold_in_critique_frac`` says how often it does).
With ``data/env`` (``recipe=search_tool``: the search environment) the student's tokens are its turns
(its searches and answer: the loss mask leaves the search results out), the teacher reading the whole
episode after c. An earlier version distilled a critique-guided *retry* sampled under c (off-policy for
the student, with no correction); bench/METHODS.md keeps its measurement.
Logged (``rlpost/rollout/hindsight_critique/*``): failed_frac, critique_chars_mean, written_frac,
gold_in_critique_frac, natural_reward (the correctness term on the batch); ``rlpost/rollout/critiqued_frac``
(the rows that carry the term; ``active/rollout/hindsight_critique`` is that share); from the loss:
opd_kl (token mean of delta on critiqued tokens), teacher_logp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.core.chat import completion_text
from rlpost.core.component import ScoringInputs
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.envs.search import contains_answer
from rlpost.losses.base import HINDSIGHT_TEACHER_LOGPS, HINDSIGHT_WEIGHT, LossInputs
from rlpost.rewards.rubric_writer import build_writer
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy, user_text, with_user_text
from rlpost.rollouts.feedback_refine import first_paragraph

KIND = "critiqued"  # a natural rollout that failed and got a critique: it carries the distillation term
INSTRUCTION = (
    "A student answered the question below and got it wrong. Write a short critique (one or two sentences) of "
    "the attempt: what went wrong and what to do differently next time. Do not state the correct answer.\n\n"
    "Question: {question}\n\nResponse: {response}{gold}"
)
GOLD = "\n\nReference: {gold}"  # what the writer sees of the gold answer (judge_sees_gold)
TEMPLATE = "Hindsight from a reviewer who saw an attempt at this question fail: {critique}"
TEACHER = HINDSIGHT_TEACHER_LOGPS  # [B, T] log pi_old(y_t | c) on critiqued rows (0 elsewhere); rlpost/losses/base.py
WEIGHT = HINDSIGHT_WEIGHT  # [B] opd_coef on this process's critiqued rows, else 0


def hindsight_opd(
    logps: torch.Tensor, teacher: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """logps [B, T] (student, grad), teacher [B, T], weight [B], mask [B, T] -> (loss [B, T], delta [B, T]).

    loss_t = w_i * sg(logps_t - teacher_t) * logps_t on rows with w_i > 0 (0 elsewhere); delta = sg(logps - teacher).
    """
    on = (weight > 0).unsqueeze(1) & mask.bool()  # [B, T] critiqued tokens that count
    delta = torch.where(on, logps.detach() - teacher, torch.zeros_like(logps))
    return weight.unsqueeze(1) * delta * logps, delta


def teacher_context(start: Any, note: str) -> Any:
    """c: x (a prompt, or an episode's first messages) with the hindsight note appended to its user turn."""
    return with_user_text(start, f"{user_text(start)}\n\n{note}")


@ROLLOUTS.register("hindsight_critique")
class HindsightCritique(RolloutStrategy):
    """HindSearch: a frozen judge critiques each failed rollout with hindsight of the gold answer; the policy
    reading the critique is the teacher on the failed rollout's own tokens (on-policy self-distillation)."""

    episodes = True  # with data/env every rollout is an episode; the teacher reads the episode after c

    @dataclass(frozen=True)
    class Config:
        # the critique writer (rlpost/rewards/rubric_writer.py WriterConfig): backend, model, max_new_tokens, ...
        writer: dict[str, Any] = field(default_factory=lambda: {"backend": "local", "max_new_tokens": 64})
        gold_column: str = "answer"  # data column with the gold answer
        judge_sees_gold: bool = True  # false: the abstract's ablation (the writer critiques without the gold)
        # a rollout failed when the correctness term scores it below this (1.0: anything but full marks)
        fail_below: Annotated[float, Range(ge=0)] = 1.0
        critiques_per_group: Annotated[int, Range(ge=1)] = 2  # failed rollouts critiqued per group (the first ones)
        max_attempt_chars: Annotated[int, Range(ge=1)] = 1000  # a failed attempt shown to the writer is cut to this
        instruction: str = INSTRUCTION  # the writer's prompt; {question} {response} {gold}
        gold: str = GOLD  # fills {gold} when judge_sees_gold (else ""); {gold}
        max_critique_chars: Annotated[int, Range(ge=1)] = 300  # a critique is cut to this length
        template: str = TEMPLATE  # the note added to x's user turn for the teacher; {critique}
        opd_coef: Annotated[float, Range(gt=0)] = 1.0  # w: weight of the distillation term per critiqued token

        def __post_init__(self):
            if "{critique}" not in self.template or "{gold}" not in self.gold:
                raise ValueError("template must contain {critique} and gold must contain {gold}")
            missing = [k for k in ("{question}", "{response}", "{gold}") if k not in self.instruction]
            if missing:
                raise ValueError(f"instruction must contain {' and '.join(missing)}")
            if self.critiques_per_group < 1 or self.max_attempt_chars < 1:
                raise ValueError("critiques_per_group and max_attempt_chars must be >= 1")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.writer = build_writer(cfg.writer)
        self.teacher_prompts: dict[int, list[int]] = {}  # critiqued row -> the prompt ids of its teacher context c
        self.notes: dict[int, str] = {}  # critiqued row -> the note added to x (for logs and tests)
        self.reward_func: Any = None  # the run's correctness term (rlpost/scoring/correctness.py), set by check_run

    def check_run(self, run: Any) -> None:
        if run.correct is None:
            raise ConfigError(
                "algorithm/rollout=hindsight_critique needs a correctness term to decide which rollouts failed: "
                "eval.correct_term names none (set eval.correct_term to a verifiable reward term)."
            )
        self.reward_func = run.reward.funcs[run.correct.index]
        if self.writer.cfg.backend == "local":
            from rlpost.models.loading import check_weights_available

            check_weights_available(self.writer.cfg.model, "algorithm.rollout.writer.model")

    def training_columns(self) -> dict[str, str]:
        return {"algorithm.rollout.gold_column": self.cfg.gold_column}

    def scores(self, prompts: list, completions: list, rows: list[dict], extra: dict[str, list]) -> list[float]:
        """The correctness term's score of each completion (NaN: unscored); ``extra``: the rollouts' own columns
        [M] (an episode's ``rlpost_env_reward``, which the env term returns)."""
        columns = {k: [r[k] for r in rows] for k in rows[0] if k not in ("prompt", "completion")}
        columns.update({k: v for k, v in extra.items() if k.startswith("rlpost_env_")})
        values = self.reward_func(prompts=prompts, completions=completions, completion_ids=None, **columns)
        return [float("nan") if v is None else float(v) for v in values]

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        """Prompts [B] -> B plain rollouts; the failed ones (up to ``critiques_per_group`` per group) with a
        written critique become ``critiqued`` rows with a teacher context c."""
        out = ctx.generate(prompts, rows=ctx.rows)
        self.teacher_prompts, self.notes = {}, {}
        col = self.cfg.gold_column
        if col not in ctx.rows[0]:
            raise KeyError(f"rollout 'hindsight_critique': no data column {col!r} (set algorithm.rollout.gold_column)")
        score = self.scores(prompts, out.completions, ctx.rows, out.extra_fields)
        failed = [i for i, s in enumerate(score) if s < self.cfg.fail_below]  # NaN < t is False: unscored is not
        ctx.log("hindsight_critique/failed_frac", len(failed) / len(prompts))
        ctx.log("hindsight_critique/natural_reward", _mean([s for s in score if s == s]))
        chosen = [
            i for g in ctx.groups(len(prompts)) for i in [j for j in g if j in failed][: self.cfg.critiques_per_group]
        ]
        asks = [self.critique_prompt(ctx.rows[i], user_text(prompts[i]), self.attempt(out, i)) for i in chosen]
        written = (
            [first_paragraph(t, self.cfg.max_critique_chars) if t else "" for t in self.writer.write(asks)]
            if asks
            else []
        )
        if chosen:
            ctx.log("hindsight_critique/written_frac", sum(map(bool, written)) / len(written))
            ctx.log("hindsight_critique/critique_chars_mean", sum(map(len, written)) / len(written))
            leaked = [contains_answer(w, str(ctx.rows[i][col])) for i, w in zip(chosen, written) if w]
            ctx.log("hindsight_critique/gold_in_critique_frac", _mean([float(x) for x in leaked]))
        critiqued = [(i, self.cfg.template.format(critique=w)) for i, w in zip(chosen, written) if w]
        starts = out.extra_fields.get("rlpost_env_start")  # an episode's first messages (the environment's reset)
        contexts = [teacher_context(prompts[i] if starts is None else starts[i], note) for i, note in critiqued]
        for (i, note), ids in zip(critiqued, ctx.prompt_ids(contexts) if contexts else []):
            self.teacher_prompts[i], self.notes[i] = list(ids), note
            out.kinds[i] = KIND
        return out

    def attempt(self, out: Rollouts, i: int) -> str:
        """The failed attempt as text: an episode's transcript (its turns and the search results), else the completion."""
        messages = out.extra_fields.get("rlpost_env_messages")
        if messages is None:
            return completion_text(out.completions[i])[: self.cfg.max_attempt_chars]
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages[i])[: self.cfg.max_attempt_chars]

    def critique_prompt(self, row: dict[str, Any], question: str, response: str) -> str:
        gold = self.cfg.gold.format(gold=row[self.cfg.gold_column]) if self.cfg.judge_sees_gold else ""
        return self.cfg.instruction.format(question=question, response=response, gold=gold)

    # ---- the distillation term -------------------------------------------------------------------
    @torch.no_grad()
    def score_rollouts(self, x: ScoringInputs) -> dict[str, torch.Tensor]:
        """{WEIGHT: [B], TEACHER: [B, T]}: opd_coef and log pi_old(y_t | c) on this process's critiqued rows."""
        ids = x.output["completion_ids"]
        idx = [i for i, k in enumerate(x.kinds or []) if k == KIND and i in self.teacher_prompts]
        weight = torch.zeros(ids.size(0), device=ids.device)
        teacher = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        if idx:
            weight[idx] = self.cfg.opd_coef
            teacher[idx] = self.teacher_logps(x, [self.teacher_prompts[i] for i in idx], idx)
        return {WEIGHT: weight, TEACHER: teacher}

    def teacher_logps(self, x: ScoringInputs, prompts: list[list[int]], idx: list[int]) -> torch.Tensor:
        """The policy's log-probs [len(idx), T] of rows idx's own completion tokens after their teacher contexts c
        (left-padded): one no-grad forward of the policy (``x.policy_logprobs``) on each completion's counted tokens."""
        ids, mask = x.output["completion_ids"][idx], x.output["completion_mask"][idx]
        completions = [row[: int(n)].tolist() for row, n in zip(ids, mask.sum(1))]  # the mask is a prefix (TRL)
        logps, _ = x.policy_logprobs(prompts, completions, width=ids.size(1))
        return logps.float()

    def loss_term(self, x: LossInputs) -> tuple[torch.Tensor | None, dict[str, float]]:
        """The distillation term [B, T] on the critiqued rows (module docstring, step 4)."""
        weight, teacher = x.batch.get(WEIGHT), x.batch.get(TEACHER)
        if weight is None or teacher is None or not bool((weight > 0).any()):
            return None, {}
        loss, delta = hindsight_opd(x.logps, teacher, weight, x.mask)
        on = (weight > 0).float().unsqueeze(1) * x.mask
        n = on.sum().clamp(min=1.0)
        return loss, {
            "hindsight_critique/opd_kl": float(delta.sum() / n),
            "hindsight_critique/teacher_logp": float((teacher * on).sum() / n),
        }

    def describe(self) -> str:
        source = self.writer.cfg.endpoint_model if self.writer.cfg.backend == "openai" else "a local model"
        gold = "with" if self.cfg.judge_sees_gold else "without"
        return (
            f"hindsight_critique (HindSearch): {source} critiques up to {self.cfg.critiques_per_group} failed rollouts "
            f"per group {gold} the gold answer; the policy reading the critique is the teacher on each failed "
            f"rollout's own tokens (on-policy reverse KL, coef {self.cfg.opd_coef:g})"
        )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
