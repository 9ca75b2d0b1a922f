"""The conditioned second rollout, trained under the original prompt: the one mechanism behind
``feedback_refine`` (DITTO, seed 004 #16), ``hindsight_critique`` (HindSearch, seed 000 #12),
``rubric_guidance`` (RISE-RL, seed 000 #6) and ``struct_refine`` (StructPO, seed 000 #10).

Per group of G rows (one prompt x), the last ``refine_per_group`` = k rows are conditioned slots:

1. natural: TRL samples the first G - k rows under x as usual;
2. condition: the variant builds conditioned prompts c = x + something (verbal feedback on an
   attempt, a hindsight critique that knows the gold answer, hints from missed rubric items), at most
   k per group (``conditions``);
3. second rollout: TRL samples z ~ pi(. | c), one per conditioned prompt;
4. keep: the variant decides which z enter the group (``keep``; RISE-RL keeps only those that beat
   the natural rollouts' mean rubric reward, the others keep all);
5. a kept z fills a slot **with the prompt ids of x**: it is scored by the reward terms and trained
   under the original prompt, so what the conditioned context made possible is distilled into the
   unconditioned policy (no feedback/critique/hint is needed at test time);
6. a slot left empty (no condition, or z not kept) gets a fresh natural rollout under x.

Choices where the abstracts are silent: the group keeps G rows (k slots, 1 <= k < G), so the batch
arithmetic of the run is unchanged and the natural rollouts and the refined ones are normalized in
one group (DITTO's "both outputs are jointly optimized with GRPO"); a conditioned prompt on a chat
prompt is multi-turn (x, the attempt as an assistant turn, the feedback as a user turn), on a plain
prompt the same texts concatenated; attempts are cut to ``max_attempt_chars``; the tokens of z were
sampled under c, so their old log-probs (computed by TRL under x) make the update an off-policy
one, as in the seeds, with no extra correction. RISE-RL's z leave the GRPO group for its separate
auxiliary objective (rubric_guidance.py: ``adjust_rewards`` and ``loss_term``), and HindSearch's retries
for its distillation term (hindsight_critique.py); ICRL's trained critic is self_critique.py (its own
layout of critic and refined rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from rlpost.core.chat import completion_text
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.rollouts.base import RolloutContext, Rollouts, RolloutStrategy, user_text, with_user_text

KIND = "conditioned"


@dataclass
class Request:
    """One conditioned prompt: for group ``group`` (row indices), from natural row ``source`` (or None)."""

    group: range
    prompt: Any
    source: int | None = None
    note: str = ""


@dataclass(frozen=True)
class ConditionedConfig:
    refine_per_group: Annotated[int, Range(ge=1)] = 2  # k: conditioned slots per group (1 <= k < train.num_generations)
    # an attempt shown in a conditioned prompt is cut to this length
    max_attempt_chars: Annotated[int, Range(ge=1)] = 1000

    def __post_init__(self):
        if self.refine_per_group < 1 or self.max_attempt_chars < 1:
            raise ValueError("refine_per_group and max_attempt_chars must be >= 1")


def revise_prompt(prompt: Any, attempt: str | None, note: str) -> Any:
    """x + attempt + note: multi-turn for a chat prompt; without an attempt, the note joins x's user text."""
    if attempt is None:
        return with_user_text(prompt, f"{user_text(prompt)}\n\n{note}")
    if isinstance(prompt, list):
        return [*prompt, {"role": "assistant", "content": attempt}, {"role": "user", "content": note}]
    return f"{prompt}{attempt}\n\n{note}\n"


class ConditionedRollout(RolloutStrategy):
    """Base of the conditioned-rollout variants: natural rows, conditioned rows, backfill."""

    Config = ConditionedConfig  # type: ignore[assignment]  # the nested Config is a shared settings dataclass, not a subclass

    def __init__(self, cfg: ConditionedConfig):
        super().__init__(cfg)
        self.last: dict[int, Request] = {}  # row -> the request whose z fills it (for logs and tests)

    def check_run(self, run: Any) -> None:
        g = run.settings.train.num_generations
        if self.cfg.refine_per_group >= g:
            raise ConfigError(
                f"algorithm.rollout.refine_per_group={self.cfg.refine_per_group} must be smaller than "
                f"train.num_generations={g}: each group needs natural rollouts to condition on."
            )

    # ---- the variant's parts ---------------------------------------------------------------
    def conditions(self, prompts: list, ctx: RolloutContext, out: Rollouts, natural: list[list[int]]) -> list[Request]:
        raise NotImplementedError(f"{type(self).__name__} must define conditions (the hook each subclass fills)")

    def keep(self, requests: list[Request], cond: Rollouts, ctx: RolloutContext, out: Rollouts) -> list[bool]:
        return [True] * len(requests)

    def attempt(self, out: Rollouts, i: int) -> str:
        return completion_text(out.completions[i])[: self.cfg.max_attempt_chars]

    # ---- the mechanism ---------------------------------------------------------------------
    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        k, groups = self.cfg.refine_per_group, ctx.groups(len(prompts))
        natural = [list(g)[: len(g) - k] for g in groups]
        rows = [i for n in natural for i in n]
        first = ctx.generate([prompts[i] for i in rows], rows=[ctx.rows[i] for i in rows])
        out = Rollouts.empty(len(prompts), first)
        for j, i in enumerate(rows):
            out.put(i, first, j)
        requests = self.conditions(prompts, ctx, out, natural)
        cond_rows = [{**ctx.rows[r.group[0]], "prompt": r.prompt} for r in requests]  # an episode starts from c
        cond = ctx.generate([r.prompt for r in requests], KIND, cond_rows) if requests else None
        kept = self.keep(requests, cond, ctx, out) if cond is not None else []
        free = {g[0]: list(g)[len(g) - k :] for g in groups}
        self.last = {}
        for j, (request, ok) in enumerate(zip(requests, kept)):
            slots = free[request.group[0]]
            if ok and slots and cond is not None:
                slot = slots.pop(0)
                out.put(slot, cond, j)
                out.prompt_ids[slot] = list(out.prompt_ids[request.group[0]])  # trained under the original x
                if out.logprobs is not None:  # sampled under c, not x: no IS correction against x
                    out.logprobs[slot] = [None] * len(out.completion_ids[slot])
                self.last[slot] = request
        empty = [i for slots in free.values() for i in slots]
        if empty:
            back = ctx.generate([prompts[i] for i in empty], rows=[ctx.rows[i] for i in empty])
            for j, i in enumerate(empty):
                out.put(i, back, j)
        ctx.log(f"{self.registry_name}/conditioned", len(requests))
        ctx.log(f"{self.registry_name}/kept_frac", sum(kept) / len(kept) if kept else 0.0)
        return out
