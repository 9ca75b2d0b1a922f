"""hindsight_critique: HindSearch's hindsight self-distillation for GRPO (seed 000 #12), on the shared
conditioned-rollout mechanism (conditioned.py).

"After each rollout, a frozen judge writes a short critique of every failed trajectory using the gold
answer, and the critique supplies an auxiliary on-policy distillation signal on the student's search
actions." Per group of G rows (prompt x), the first G - k are natural rollouts y ~ pi(. | x):

1. failed: y failed when the run's correctness term (``eval.correct_term``, the exact-match style
   reward that ``eval/accuracy`` reads, rlpost/scoring/correctness.py) scores it below ``fail_below``;
2. critique: a frozen writer (rlpost/rewards/rubric_writer.py: a local model, SmolLM2-135M-Instruct by
   default, ``writer.model.source=qwen2_5_coder`` sharper, or an OpenAI-compatible endpoint) reads
   ``instruction`` filled with the question, the failed attempt and, when ``judge_sees_gold`` (the
   abstract's ablation turns it off), the gold answer, and writes a short critique (its first
   paragraph, cut to ``max_critique_chars``). The critique is the writer's text, not a template;
3. guided retry: for up to k failed rollouts per group, the policy samples z ~ pi(. | c) with
   c = (x, the failed attempt, ``template`` filled with the critique);
4. the retry leaves the GRPO group: z fills a slot under x's prompt ids with reward NaN
   (``adjust_rewards``), so the group's baseline and advantages are the natural rollouts' only;
5. distillation (``loss_term``): the critique-conditioned policy is the teacher on z's own tokens,
   the same policy under the plain x the student. With T completion tokens of micro-batch B::

       teacher_t = log pi_old(z_t | c, z_<t)       [B, T] no-grad forward at scoring time (score_rollouts)
       student_t = log pi_theta(z_t | x, z_<t)    [B, T] the loss's logps (requires grad)
       delta_t   = sg(student_t - teacher_t)      [B, T] sampled-token reverse-KL estimate
       l_t       = w_i * delta_t * student_t      [B, T] w_i = opd_coef on retry rows, else 0

   whose gradient ``w * delta_t * grad log pi_theta(z_t | x)`` is the per-token (discount 0) policy
   gradient of KL(pi(.|x) || pi(.|c)) with reward -delta: tokens the critique made likelier than the
   plain prompt does (delta < 0) are pushed up under x, the others down. The term adds to the run's
   GRPO loss on the natural rows and goes through the run's aggregation (masked like every row).

Choices where the abstract is silent: the critique writer is separate from the policy and frozen
(greedy, ``writer.max_new_tokens``); without the gold it still knows the attempt failed (failure is
the reward's verdict, not the judge's); a failed rollout whose critique could not be written (endpoint
error, empty text) gets no retry; the retry is always kept; more failed rollouts than k: the first k
in row order (the reward is binary, there is no "most wrong"); the teacher is the policy that sampled
the batch (pi_old; the same as pi_theta at num_iterations 1) rather than a separate frozen copy (the
abstract's "self-distillation"); the sampled-token estimator drops the importance ratio
pi_theta(z|x) / pi(z|c) (z was sampled under c), as on-policy distillation with a critique-shifted
teacher usually does, to keep the variance of a 32-token ratio out of the term; the critique may
state the gold answer (the writer is asked not to; ``gold_in_critique_frac`` says how often it does).
With ``data/env`` (``recipe=search_tool``: the search environment) every rollout is an episode: the
natural ones, then the retry, which starts from c (the environment's system message, x, the failed
episode's transcript as one assistant turn, the critique) and may call ``<search>`` like any episode;
the correctness term is the environment's reward; the distillation term covers the policy's tokens only
(its searches and answer: the loss mask leaves the search results out), the teacher reading them after c.
Logged (``rlpost/rollout/hindsight_critique/*``): failed_frac, critique_chars_mean, written_frac,
gold_in_critique_frac, retry_reward (the correctness term on the retries under x: how actionable the
critiques are), natural_reward; from the loss: opd_kl (token mean of delta on retry tokens), teacher_logp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.core.component import ScoringInputs
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.envs.search import contains_answer
from rlpost.losses.base import HINDSIGHT_TEACHER_LOGPS, HINDSIGHT_WEIGHT, LossInputs
from rlpost.rewards.rubric_writer import build_writer
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, user_text
from rlpost.rollouts.conditioned import KIND, ConditionedConfig, ConditionedRollout, Request, revise_prompt
from rlpost.rollouts.feedback_refine import first_paragraph

INSTRUCTION = (
    "A student answered the question below and got it wrong. Write a short critique (one or two sentences) of "
    "the attempt: what went wrong and what to do differently next time. Do not state the correct answer.\n\n"
    "Question: {question}\n\nResponse: {response}{gold}"
)
GOLD = "\n\nReference: {gold}"  # what the writer sees of the gold answer (judge_sees_gold)
TEMPLATE = "A reviewer's critique of your response: {critique}\nTry again, taking the critique into account."
TEACHER = HINDSIGHT_TEACHER_LOGPS  # [B, T] log pi_old(z_t | c) on retry rows (0 elsewhere); rlpost/losses/base.py
WEIGHT = HINDSIGHT_WEIGHT  # [B] opd_coef on this process's retry rows, else 0


def hindsight_opd(
    logps: torch.Tensor, teacher: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """logps [B, T] (student, grad), teacher [B, T], weight [B], mask [B, T] -> (loss [B, T], delta [B, T]).

    loss_t = w_i * sg(logps_t - teacher_t) * logps_t on rows with w_i > 0 (0 elsewhere); delta = sg(logps - teacher).
    """
    on = (weight > 0).unsqueeze(1) & mask.bool()  # [B, T] retry tokens that count
    delta = torch.where(on, logps.detach() - teacher, torch.zeros_like(logps))
    return weight.unsqueeze(1) * delta * logps, delta


@ROLLOUTS.register("hindsight_critique")
class HindsightCritique(ConditionedRollout):
    """HindSearch: a frozen judge critiques each failed rollout with hindsight of the gold answer; the policy's
    critique-guided retry leaves the GRPO group and teaches the plain-prompt policy by on-policy distillation."""

    reward_adjustment = "relative"  # the retry rows leave the group (NaN), per term too
    episodes = True  # with data/env every rollout, the retry included, is an episode (it may search)

    @dataclass(frozen=True)
    class Config(ConditionedConfig):
        # the critique writer (rlpost/rewards/rubric_writer.py WriterConfig): backend, model, max_new_tokens, ...
        writer: dict[str, Any] = field(default_factory=lambda: {"backend": "local", "max_new_tokens": 64})
        gold_column: str = "answer"  # data column with the gold answer
        judge_sees_gold: bool = True  # false: the abstract's ablation (the writer critiques without the gold)
        # a natural rollout failed when the correctness term scores it below this (1.0: anything but full marks)
        fail_below: Annotated[float, Range(ge=0)] = 1.0
        instruction: str = INSTRUCTION  # the writer's prompt; {question} {response} {gold}
        gold: str = GOLD  # fills {gold} when judge_sees_gold (else ""); {gold}
        max_critique_chars: Annotated[int, Range(ge=1)] = 300  # a critique is cut to this length
        template: str = TEMPLATE  # the user turn after the failed attempt; {critique}
        opd_coef: Annotated[float, Range(gt=0)] = 1.0  # w: weight of the distillation term per retry token

        def __post_init__(self):
            super().__post_init__()
            if "{critique}" not in self.template or "{gold}" not in self.gold:
                raise ValueError("template must contain {critique} and gold must contain {gold}")
            missing = [k for k in ("{question}", "{response}", "{gold}") if k not in self.instruction]
            if missing:
                raise ValueError(f"instruction must contain {' and '.join(missing)}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.writer = build_writer(cfg.writer)
        self.teacher_prompts: dict[int, list[int]] = {}  # retry row -> the prompt ids of c it was sampled under
        self.reward_func: Any = None  # the run's correctness term (rlpost/scoring/correctness.py), set by check_run

    def baseline_rows(self, num_generations: int) -> int:
        """The last ``refine_per_group`` rows of a group may leave it (NaN): the first G - k stay."""
        return num_generations - self.cfg.refine_per_group

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        if run.correct is None:
            raise ConfigError(
                "algorithm/rollout=hindsight_critique needs a correctness term to decide which rollouts failed: "
                "eval.correct_term names none (set eval.correct_term to a verifiable reward term)."
            )
        self.reward_func = run.reward.funcs[run.correct.index]
        if self.writer.cfg.backend == "local":
            from rlpost.models.loading import check_weights_available

            check_weights_available(self.writer.cfg.model, "algorithm.rollout.writer.model")

    def scores(self, prompts: list, completions: list, rows: list[dict], extra: dict[str, list]) -> list[float]:
        """The correctness term's score of each completion (NaN: unscored); ``extra``: the rollouts' own columns
        [M] (an episode's ``rlpost_env_reward``, which the env term returns)."""
        columns = {k: [r[k] for r in rows] for k in rows[0] if k not in ("prompt", "completion")}
        columns.update({k: v for k, v in extra.items() if k.startswith("rlpost_env_")})
        values = self.reward_func(prompts=prompts, completions=completions, completion_ids=None, **columns)
        return [float("nan") if v is None else float(v) for v in values]

    def conditions(self, prompts: list, ctx: RolloutContext, out: Rollouts, natural: list[list[int]]) -> list[Request]:
        col, rows = self.cfg.gold_column, [i for n in natural for i in n]
        if col not in ctx.rows[0]:
            raise KeyError(f"rollout 'hindsight_critique': no data column {col!r} (set algorithm.rollout.gold_column)")
        extra = {k: [v[i] for i in rows] for k, v in out.extra_fields.items()}
        score = dict(zip(rows, self.scores([prompts[i] for i in rows], [out.completions[i] for i in rows],
                                           [ctx.rows[i] for i in rows], extra)))  # fmt: skip
        failed = [i for i in rows if score[i] < self.cfg.fail_below]  # NaN < t is False: unscored is not failed
        ctx.log("hindsight_critique/failed_frac", len(failed) / len(rows))
        ctx.log("hindsight_critique/natural_reward", _mean([s for s in score.values() if s == s]))
        chosen = [i for n in natural for i in [j for j in n if j in failed][: self.cfg.refine_per_group]]
        asks = [self.critique_prompt(ctx.rows[i], user_text(prompts[i]), self.attempt(out, i)) for i in chosen]
        texts = self.writer.write(asks) if asks else []
        written = [first_paragraph(t, self.cfg.max_critique_chars) if t else "" for t in texts]
        if chosen:
            ctx.log("hindsight_critique/written_frac", sum(map(bool, written)) / len(written))
            ctx.log("hindsight_critique/critique_chars_mean", sum(map(len, written)) / len(written))
            leaked = [contains_answer(w, str(ctx.rows[i][col])) for i, w in zip(chosen, written) if w]
            ctx.log("hindsight_critique/gold_in_critique_frac", _mean([float(x) for x in leaked]))
        requests = []
        for i, critique in zip(chosen, written):
            if critique:
                note = self.cfg.template.format(critique=critique)
                group = range(i - i % ctx.num_generations, i - i % ctx.num_generations + ctx.num_generations)
                requests.append(Request(group, revise_prompt(prompts[i], self.attempt(out, i), note), i, note))
        return requests

    def attempt(self, out: Rollouts, i: int) -> str:
        """The failed attempt as text: an episode's transcript (its turns and the search results), else the completion."""
        messages = out.extra_fields.get("rlpost_env_messages")
        if messages is None:
            return super().attempt(out, i)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages[i])[: self.cfg.max_attempt_chars]

    def critique_prompt(self, row: dict[str, Any], question: str, response: str) -> str:
        gold = self.cfg.gold.format(gold=row[self.cfg.gold_column]) if self.cfg.judge_sees_gold else ""
        return self.cfg.instruction.format(question=question, response=response, gold=gold)

    def keep(self, requests: list[Request], cond: Rollouts, ctx: RolloutContext, out: Rollouts) -> list[bool]:
        """Every retry is kept; remembers the prompt ids of c per request and logs the retries' reward under x."""
        self._cond_ids = {id(r): cond.prompt_ids[j] for j, r in enumerate(requests)}
        rows = [ctx.rows[r.group[0]] for r in requests]
        x = [self._prompts[r.group[0]] for r in requests]
        retry = self.scores(x, cond.completions, rows, cond.extra_fields)
        ctx.log("hindsight_critique/retry_reward", _mean([s for s in retry if s == s]))
        return [True] * len(requests)

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        self._prompts, self._cond_ids = prompts, {}
        out = super().generate(prompts, ctx)
        self.teacher_prompts = {slot: list(self._cond_ids[id(r)]) for slot, r in self.last.items()}
        return out

    # ---- out of the GRPO group, into the distillation term -------------------------------------
    def adjust_rewards(
        self, rewards: torch.Tensor, kinds: list[str], rows: list[dict], completions: list, group_size: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Retry rows [N] -> NaN: the group's baseline and advantages are its natural rollouts'."""
        retry = torch.tensor([k == KIND for k in kinds], device=rewards.device)
        return rewards.masked_fill(retry, float("nan")), {}

    @torch.no_grad()
    def score_rollouts(self, x: ScoringInputs) -> dict[str, torch.Tensor]:
        """{WEIGHT: [B], TEACHER: [B, T]}: opd_coef and log pi_old(z_t | c) on this process's retry rows."""
        ids = x.output["completion_ids"]
        idx = [i for i, k in enumerate(x.kinds or []) if k == KIND and i in self.teacher_prompts]
        weight = torch.zeros(ids.size(0), device=ids.device)
        teacher = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        if idx:
            weight[idx] = self.cfg.opd_coef
            teacher[idx] = self.teacher_logps(x, [self.teacher_prompts[i] for i in idx], idx)
        return {WEIGHT: weight, TEACHER: teacher}

    def teacher_logps(self, x: ScoringInputs, prompts: list[list[int]], idx: list[int]) -> torch.Tensor:
        """The policy's log-probs [len(idx), T] of rows idx's completion tokens after the prompts of c (left-padded):
        one no-grad forward of the policy (``x.policy_logprobs``) on each completion's counted tokens."""
        ids, mask = x.output["completion_ids"][idx], x.output["completion_mask"][idx]
        completions = [row[: int(n)].tolist() for row, n in zip(ids, mask.sum(1))]  # the mask is a prefix (TRL)
        logps, _ = x.policy_logprobs(prompts, completions, width=ids.size(1))
        return logps.float()

    def loss_term(self, x: LossInputs) -> tuple[torch.Tensor | None, dict[str, float]]:
        """The distillation term [B, T] on the retry rows (module docstring, step 5)."""
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
            f"hindsight_critique (HindSearch): {source} critiques up to {self.cfg.refine_per_group} failed rollouts per "
            f"group {gold} the gold answer; the critique-guided retry leaves the GRPO group and is distilled into the "
            f"plain-prompt policy (reverse KL on its tokens, coef {self.cfg.opd_coef:g})"
        )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
