"""rubric_guidance: RISE-RL's privileged trajectories from repeatedly missed rubric items
(seed 000 #6), on the shared conditioned-rollout mechanism (conditioned.py).

RISE-RL "uses repeatedly missed rubric criteria to elicit privileged trajectories", "retains only
trajectories whose complete-rubric reward exceeds the mean reward of natural rollouts, and then
re-evaluates them under the original prompt". Per group, with s_ij the judge score of natural
rollout i on criterion j (the rubric reward's judge, rlpost/rewards/rubric.py)::

    missed_j = mean_i 1[s_ij < miss_below] >= miss_fraction          (NaN scores left out)
    hint     = the texts of the missed criteria, appended to x's user message
    keep z   iff  R(z) > mean_i R(y_i)        R = the complete rubric's weighted mean

k privileged rollouts z are sampled under x + hint; the kept ones join the group under x (they
are scored again there by the run's reward terms), the others are dropped and their slots get
natural rollouts.

Choices where the abstract is silent: "repeatedly missed" is read within the group (a criterion
missed by at least ``miss_fraction`` of the natural rollouts); a group that misses nothing gets no
privileged rollout; the hint does not include any attempt; a z or a group whose rubric score is
NaN (every judge call failed) is not kept. Not implemented: RISE-RL's separate auxiliary objective
and its removal "once its additional benefit diminishes" (the kept z join the GRPO group).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.errors import ConfigError
from rlpost.rewards.base import ParamError, completion_text
from rlpost.rewards.rubric import Rubric
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, user_text
from rlpost.rollouts.conditioned import ConditionedConfig, ConditionedRollout, Request, revise_prompt
from rlpost.schema import Range, build_config

HINT = "Make sure your response meets these criteria:\n{criteria}"


def missed_criteria(scores: torch.Tensor, below: float, fraction: float) -> torch.Tensor:
    """scores [n, J] (NaN: not judged) -> missed [J] bool: mean_i 1[s_ij < below] >= fraction over judged i."""
    judged = ~torch.isnan(scores)
    low = (scores < below) & judged
    share = low.sum(0) / judged.sum(0).clamp(min=1)
    return (share >= fraction) & judged.any(0)


def rise_keep(privileged: torch.Tensor, natural: torch.Tensor) -> torch.Tensor:
    """privileged R(z) [K], natural R(y) [n] -> keep [K] bool: R(z) > nanmean(R(y)) (NaN -> not kept)."""
    return privileged > torch.nanmean(natural)  # comparisons with NaN are False


def weighted_mean(scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """scores [n, J] (NaN: not judged), weights [J] -> [n]: sum_j w_j s_ij / sum_j w_j over judged j."""
    judged = ~torch.isnan(scores)
    w = weights.expand_as(scores) * judged
    return (torch.nan_to_num(scores) * w).sum(1) / w.sum(1)  # 0/0 = NaN when nothing was judged


@ROLLOUTS.register("rubric_guidance")
class RubricGuidance(ConditionedRollout):
    """RISE-RL: hints from missed rubric items -> privileged rollouts, kept when they beat the natural mean."""

    @dataclass(frozen=True)
    class Config(ConditionedConfig):
        rubric: dict[str, Any] = field(default_factory=dict)  # the rubric reward's params (rlpost/rewards/rubric.py)
        # a criterion score (in [0, 1]) below this is a miss: 0 = never, above 1 = always
        miss_below: Annotated[float, Range(ge=0)] = 0.5
        # a criterion is "repeatedly missed" by at least this share of natural rollouts
        miss_fraction: Annotated[float, Range(gt=0, le=1)] = 0.5
        hint: str = HINT  # appended to the user message; {criteria}: one "- text" line per missed criterion

        def __post_init__(self):
            super().__post_init__()
            if not 0 < self.miss_fraction <= 1 or "{criteria}" not in self.hint:
                raise ValueError("need 0 < miss_fraction <= 1 and a hint containing {criteria}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        try:
            self.rubric = Rubric(build_config(Rubric.Config, cfg.rubric, "algorithm.rollout.rubric"))
        except ParamError as err:
            raise ConfigError(f"algorithm.rollout.rubric.{err.key}: {err.message}") from None
        self._natural_mean: dict[int, torch.Tensor] = {}

    def _criteria(self, row: dict) -> list:
        col = self.rubric.cfg.rubric_column
        return self.rubric.rubric_for(row.get(col) if col else None)

    def scores(self, prompts: list, completions: list, rows: list[dict]) -> list[torch.Tensor]:
        """Per completion, its criterion scores [J] (NaN where the judge failed)."""
        ref_col, jobs, texts = self.rubric.cfg.reference_column, [], []
        for i, (prompt, completion, row) in enumerate(zip(prompts, completions, rows)):
            for j, criterion in enumerate(self._criteria(row)):
                jobs.append((i, j))
                ref = row.get(ref_col) if ref_col else None
                texts.append(self.rubric.judge_prompt(user_text(prompt), completion_text(completion), criterion, ref))
        out = [torch.full((len(self._criteria(row)),), float("nan")) for row in rows]
        for (i, j), s in zip(jobs, self.rubric.judge.score(texts)):
            if s is not None:
                out[i][j] = s
        return out

    def conditions(self, prompts: list, ctx: RolloutContext, out: Rollouts, natural: list[list[int]]) -> list[Request]:
        requests, self._natural_mean, self._prompts = [], {}, prompts
        missed_total = 0
        for rows in natural:
            criteria = self._criteria(ctx.rows[rows[0]])
            weights = torch.tensor([c.weight for c in criteria])
            s = torch.stack(
                self.scores([prompts[i] for i in rows], [out.completions[i] for i in rows], [ctx.rows[i] for i in rows])
            )
            self._natural_mean[rows[0]] = weighted_mean(s, weights)
            missed = missed_criteria(s, self.cfg.miss_below, self.cfg.miss_fraction)
            missed_total += int(missed.sum())
            if not missed.any():
                continue
            note = self.cfg.hint.format(
                criteria="\n".join(f"- {c.text}" for c, m in zip(criteria, missed.tolist()) if m)
            )
            group = range(rows[0], rows[0] + ctx.num_generations)
            requests += [
                Request(group, revise_prompt(prompts[rows[0]], None, note), None, note)
            ] * self.cfg.refine_per_group
        ctx.log("rubric_guidance/missed_criteria_per_group", missed_total / len(natural))
        return requests

    def keep(self, requests: list[Request], cond: Rollouts, ctx: RolloutContext, out: Rollouts) -> list[bool]:
        starts = [r.group[0] for r in requests]
        x = [self._prompts[s] for s in starts]  # judged under the original prompt
        scores = self.scores(x, cond.completions, [ctx.rows[s] for s in starts])
        kept = []
        for start, s in zip(starts, scores):
            criteria = self._criteria(ctx.rows[start])
            privileged = weighted_mean(s.unsqueeze(0), torch.tensor([c.weight for c in criteria]))
            kept.append(bool(rise_keep(privileged, self._natural_mean[start])[0]))
        return kept
