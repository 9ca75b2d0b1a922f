"""struct_refine: StructPO's refinement-guided optimization (seed 000 #10), on the conditioned-rollout
mechanism (conditioned.py); the other half of StructPO, struct-aware credit, is ``advantage=segments``.

"StructPO introduces struct-aware credit assignment to decouple local stage quality from global
coherence and refinement-guided optimization to internalize revision behavior into the first-pass
policy" (seed 000 #10). Per group of G rows (prompt x), with k = ``refine_per_group``:

1. the G - k natural drafts are scored with the run's own reward (its terms and combination);
2. the k lowest-scoring drafts are revised by the policy itself: a revise turn after the draft asks
   it to keep the stage structure (the stage markers of ``advantage=segments``, in order) and improve
   each stage;
3. a revision joins the group **under x** only when its reward is above its draft's (``keep:
   improved``; ``all`` keeps every revision); an empty slot gets a fresh draft under x.

A kept revision is trained as a first-pass completion of x, so the first pass learns what revision
fixed, with no revision at test time; under ``advantage=segments`` its stages get their own credit.

Choices where the abstract is silent: the revised drafts are the weakest ones (ties: the earlier);
"better" is a strictly higher combined reward under x (an unscorable draft or revision is never
better); the revision is scored here and again by the trainer's reward pass (one extra reward call
per draft and per revision: with a judge-based reward that doubles the judge calls); without
``advantage=segments`` the revise turn names no stages. Logged: ``struct_refine/improved_frac``
(revisions that beat their draft), ``struct_refine/draft_reward`` (mean over the revised drafts) and
the mechanism's ``conditioned`` and ``kept_frac``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from rlpost.core.chat import completion_text
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts
from rlpost.rollouts.conditioned import ConditionedConfig, ConditionedRollout, Request, revise_prompt
from rlpost.scoring.score import score

REVISE = (
    "Revise your response above.{stages} Fix what is wrong or weak in each part and keep what is right. "
    "Write the whole revised response."
)
STAGES = " Keep its stages in this order, each opened by its marker: {markers}."


@ROLLOUTS.register("struct_refine")
class StructRefine(ConditionedRollout):
    """StructPO: the policy revises its weakest drafts stage by stage; better revisions train under x."""

    @dataclass(frozen=True)
    class Config(ConditionedConfig):
        revise: str = REVISE  # the revise turn; {stages} = the stage sentence (empty without segments)
        keep: Literal["improved", "all"] = "improved"  # which revisions join the group

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.markers: list[str] = []  # advantage=segments' stage markers, set by check_run
        self._reward: Any = None  # the run's RewardParts, set by check_run
        self._draft: dict[int, float] = {}  # source row -> its draft's reward (this batch)

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        advantage = run.algorithm.advantage
        self.markers = list(advantage.cfg.stages) if type(advantage).registry_name == "segments" else []
        self._reward = run.reward

    def rewards_under_x(self, ctx: RolloutContext, sources: list[int], completions: list) -> list[float]:
        """The run's combined reward of each completion under the prompt of its source row (NaN: unscorable)."""
        texts = [completion_text(c) for c in completions]
        terms = score([ctx.rows[i] for i in sources], texts, 1, self._reward.funcs)
        return self._reward.scored(terms)[0].tolist()

    def conditions(self, prompts: list, ctx: RolloutContext, out: Rollouts, natural: list[list[int]]) -> list[Request]:
        stages = STAGES.format(markers=", ".join(self.markers)) if self.markers else ""
        note = self.cfg.revise.format(stages=stages)
        drafts = [i for rows in natural for i in rows]
        rewards = self.rewards_under_x(ctx, drafts, [out.completions[i] for i in drafts])
        self._draft = dict(zip(drafts, rewards))
        requests = []
        for rows in natural:
            weakest = sorted(rows, key=lambda i: (_order(self._draft[i]), i))[: self.cfg.refine_per_group]
            group = range(rows[0], rows[0] + ctx.num_generations)
            for source in weakest:
                requests.append(
                    Request(group, revise_prompt(prompts[source], self.attempt(out, source), note), source, note)
                )
        revised = [self._draft[r.source] for r in requests if r.source is not None]
        ctx.log("struct_refine/draft_reward", _nanmean(revised))
        return requests

    def keep(self, requests: list[Request], cond: Rollouts, ctx: RolloutContext, out: Rollouts) -> list[bool]:
        sources = [r.source for r in requests if r.source is not None]
        assert len(sources) == len(requests)  # every request revises a draft
        after = self.rewards_under_x(ctx, sources, cond.completions)
        improved = [_better(a, self._draft[s]) for a, s in zip(after, sources)]
        ctx.log("struct_refine/improved_frac", sum(improved) / len(improved) if improved else 0.0)
        return improved if self.cfg.keep == "improved" else [True] * len(requests)


def _order(reward: float) -> float:
    """Sort key: lowest reward first; an unscorable draft (NaN) counts as the lowest."""
    return -math.inf if math.isnan(reward) else reward


def _better(after: float, before: float) -> bool:
    """A revision is better when both are scorable and its reward is strictly higher."""
    return not (math.isnan(after) or math.isnan(before)) and after > before


def _nanmean(values: list[float]) -> float:
    kept = torch.tensor([v for v in values if not math.isnan(v)])
    return float(kept.mean()) if len(kept) else float("nan")
