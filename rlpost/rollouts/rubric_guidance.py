"""rubric_guidance: RISE-RL's privileged trajectories from repeatedly missed rubric items and their
separate auxiliary objective (seed 000 #6), on the shared conditioned-rollout mechanism (conditioned.py).

RISE-RL "uses repeatedly missed rubric criteria to elicit privileged trajectories", "retains only
trajectories whose complete-rubric reward exceeds the mean reward of natural rollouts, and then
re-evaluates them under the original prompt", trains them through a separate auxiliary objective and
removes it "once its additional benefit diminishes". With s_ij the judge score of natural rollout i on
criterion j (the rubric reward's judge, rlpost/rewards/rubric.py)::

    missed_j(group)  = mean_i 1[s_ij < miss_below] >= miss_fraction          (NaN scores left out)
    misses_j        += 1 for every group that misses j                         (counted across training)
    hint             = the texts of the criteria this group misses with misses_j >= repeat_min
    keep z          iff R(z) > mean_i R(y_i)        R = the complete rubric's weighted mean, under x

k privileged rollouts z are sampled under x + hint; a kept z fills a slot under x, the others are
dropped and their slots get natural rollouts. A kept z does not join the GRPO group: its reward is NaN
in the pipeline (the group's baseline and its advantages are the natural rollouts'), and it is trained
by the auxiliary objective instead, ``aux_coef * (-log pi(z_t | x))`` per token (``loss_term``), in the
run's aggregation. Removal rule: per batch, benefit = mean over the sampled z of R(z) - mean_i R(y_i) (how
much better the hint makes the policy); its exponential average (``benefit_decay``) below ``fade_below``
for ``patience`` batches in a row switches the auxiliary objective off for the rest of the run, and with
it the privileged rollouts (their slots get natural rollouts). Counts, the average and the switch are
checkpointed.

Choices where the abstract is silent: a criterion is keyed by its text (per-row rubrics share counts
across rows); the auxiliary objective is a likelihood term on the kept privileged tokens (an SFT-like
term re-evaluated under x, not a policy gradient); a group that misses nothing repeated gets no
privileged rollout; the hint does not include any attempt; a z or a group whose rubric score is NaN
(every judge call failed) is not kept. Privileged rows count in ``rlpost/unscorable_frac`` (their NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.core.chat import completion_text
from rlpost.core.component import ScoringInputs
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range, build_config
from rlpost.losses.base import GUIDED, LossInputs
from rlpost.rewards.base import ParamError
from rlpost.rewards.rubric import Rubric
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, user_text
from rlpost.rollouts.conditioned import KIND, ConditionedConfig, ConditionedRollout, Request, revise_prompt

HINT = "Make sure your response meets these criteria:\n{criteria}"


def faded(ema: float | None, benefit: float, decay: float, below: float, streak: int) -> tuple[float, int]:
    """One batch of the removal rule: the new exponential average of the benefit and the run of batches below
    ``below`` (ema = benefit on the first batch, else decay * ema + (1 - decay) * benefit)."""
    ema = benefit if ema is None else decay * ema + (1 - decay) * benefit
    return ema, streak + 1 if ema < below else 0


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
    """RISE-RL: repeatedly missed rubric items -> privileged rollouts, kept when they beat the natural mean,
    trained by an auxiliary objective that is removed once the hints stop helping."""

    stateful = True  # miss counts, the benefit average and the switch travel with checkpoints (rlpost/runs/state.py)
    reward_adjustment = "relative"  # the kept privileged rows leave the group (NaN), per term too

    @dataclass(frozen=True)
    class Config(ConditionedConfig):
        rubric: dict[str, Any] = field(default_factory=dict)  # the rubric reward's params (rlpost/rewards/rubric.py)
        # a criterion score (in [0, 1]) below this is a miss: 0 = never, above 1 = always
        miss_below: Annotated[float, Range(ge=0)] = 0.5
        # a criterion is "repeatedly missed" by at least this share of natural rollouts
        miss_fraction: Annotated[float, Range(gt=0, le=1)] = 0.5
        hint: str = HINT  # appended to the user message; {criteria}: one "- text" line per missed criterion
        # a criterion is "repeatedly missed" once this many groups across training missed it
        repeat_min: Annotated[int, Range(ge=1)] = 2
        aux_coef: Annotated[float, Range(gt=0)] = 0.1  # weight of the auxiliary -log pi(z | x) per privileged token
        benefit_decay: Annotated[float, Range(ge=0, lt=1)] = 0.5  # exponential average of the per-batch benefit
        # the objective is removed once the averaged benefit R(z) - mean R(y) stays below this ...
        fade_below: Annotated[float, Range(ge=-1, le=1)] = 0.0
        patience: Annotated[int, Range(ge=1)] = 3  # ... for this many batches in a row

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
        self.misses: dict[str, int] = {}  # criterion text -> groups that missed it, across training
        self.benefit: float | None = None  # the exponential average of R(z) - mean R(y)
        self.low_streak = 0  # batches in a row with the average below fade_below
        self.aux_on = True  # the auxiliary objective and its privileged rollouts (off for good once faded)

    def baseline_rows(self, num_generations: int) -> int:
        """The last ``refine_per_group`` rows of a group may leave it (NaN): the first G - k stay."""
        return num_generations - self.cfg.refine_per_group

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
        ctx.log("rubric_guidance/aux_on", float(self.aux_on))
        if not self.aux_on:  # removed: no privileged rollouts, every slot natural
            return []
        missed_total = repeated_total = 0
        for rows in natural:
            criteria = self._criteria(ctx.rows[rows[0]])
            weights = torch.tensor([c.weight for c in criteria])
            s = torch.stack(
                self.scores([prompts[i] for i in rows], [out.completions[i] for i in rows], [ctx.rows[i] for i in rows])
            )
            self._natural_mean[rows[0]] = weighted_mean(s, weights)
            missed = missed_criteria(s, self.cfg.miss_below, self.cfg.miss_fraction).tolist()
            for c, m in zip(criteria, missed):
                self.misses[c.text] = self.misses.get(c.text, 0) + int(m)
            repeated = [c for c, m in zip(criteria, missed) if m and self.misses[c.text] >= self.cfg.repeat_min]
            missed_total += sum(missed)
            repeated_total += len(repeated)
            if not repeated:
                continue
            note = self.cfg.hint.format(criteria="\n".join(f"- {c.text}" for c in repeated))
            group = range(rows[0], rows[0] + ctx.num_generations)
            requests += [
                Request(group, revise_prompt(prompts[rows[0]], None, note), None, note)
            ] * self.cfg.refine_per_group
        ctx.log("rubric_guidance/missed_criteria_per_group", missed_total / len(natural))
        ctx.log("rubric_guidance/repeated_criteria_per_group", repeated_total / len(natural))
        return requests

    def keep(self, requests: list[Request], cond: Rollouts, ctx: RolloutContext, out: Rollouts) -> list[bool]:
        starts = [r.group[0] for r in requests]
        x = [self._prompts[s] for s in starts]  # judged under the original prompt
        scores = self.scores(x, cond.completions, [ctx.rows[s] for s in starts])
        kept, gains = [], []
        for start, s in zip(starts, scores):
            criteria = self._criteria(ctx.rows[start])
            privileged = weighted_mean(s.unsqueeze(0), torch.tensor([c.weight for c in criteria]))
            kept.append(bool(rise_keep(privileged, self._natural_mean[start])[0]))
            gains.append((privileged[0] - torch.nanmean(self._natural_mean[start])).item())
        gains = [g for g in gains if not math.isnan(g)]
        if gains:  # the removal rule (module docstring)
            benefit = sum(gains) / len(gains)
            self.benefit, self.low_streak = faded(
                self.benefit, benefit, self.cfg.benefit_decay, self.cfg.fade_below, self.low_streak
            )
            self.aux_on = self.low_streak < self.cfg.patience
            ctx.log("rubric_guidance/benefit", benefit)
            ctx.log("rubric_guidance/benefit_ema", self.benefit)
        return kept

    # ---- the separate objective: out of the GRPO group, into the auxiliary term ------------------
    def adjust_rewards(
        self, rewards: torch.Tensor, kinds: list[str], rows: list[dict], completions: list, group_size: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Kept privileged rows [N] -> NaN: the group's baseline and advantages are its natural rollouts'."""
        guided = torch.tensor([k == KIND for k in kinds], device=rewards.device)
        return rewards.masked_fill(guided, float("nan")), {}

    def score_rollouts(self, x: ScoringInputs) -> dict[str, torch.Tensor]:
        """``rlpost_guided`` [B]: ``aux_coef`` on this process's kept privileged rows (training), else 0."""
        kinds, ids = x.kinds, x.output["completion_ids"]
        weight = [self.cfg.aux_coef if k == KIND else 0.0 for k in kinds] if kinds else [0.0] * ids.size(0)
        return {GUIDED: torch.tensor(weight, device=ids.device)}

    def loss_term(self, x: LossInputs) -> tuple[torch.Tensor | None, dict[str, float]]:
        """The auxiliary objective: ``-w_i * logp_it`` [B, T] on the guided rows (w = ``rlpost_guided``)."""
        weight = x.batch.get(GUIDED)
        if weight is None or not bool((weight > 0).any()):
            return None, {}
        rows = (weight > 0).float().unsqueeze(1) * x.mask  # [B, T] the guided tokens that count
        nll = float((-x.logps.detach() * rows).sum() / rows.sum().clamp(min=1.0))
        return -weight.unsqueeze(1) * x.logps, {"rubric_guidance/aux_nll": nll}

    def state_dict(self) -> dict[str, Any]:
        return {"misses": dict(self.misses), "benefit": self.benefit, "low_streak": self.low_streak,
                "aux_on": self.aux_on}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.misses = dict(state["misses"])
        self.benefit, self.low_streak, self.aux_on = state["benefit"], state["low_streak"], state["aux_on"]
