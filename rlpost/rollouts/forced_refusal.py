"""forced_refusal: RC-GRPO's refusal-calibrated rollouts (seed 000 #9).

For a prompt with no valid answer (the data column ``unanswerable_column`` is true), the group
must contain a refusal, or every rollout is an equally wrong answer and the group carries no
advantage signal. After TRL samples the group, the last non-refusing rollouts are replaced by the
fixed ``refusal`` string until the group holds ``min_refusals`` refusals. The rewards are then set
(``adjust_rewards``, right after ``combine``)::

    r'_i = u_i * (ref_i * c_refusal + (1 - ref_i) * c_answer) + (1 - u_i) * (r_i - lambda * ref_i)

with u_i = 1 for an unanswerable prompt, ref_i = 1 when completion i refuses, r_i the combined
task reward, c_refusal = ``refusal_reward``, c_answer = ``answer_reward`` and lambda = ``penalty``:
the over-refusal penalty on answerable ("positive") prompts that the abstract names.

Choices where the abstract is silent (it is about "None" boxes of a grounding model):
- The reward terms cannot score a question without an answer, so on unanswerable prompts the
  strategy sets the reward itself (refusal right, anything else wrong); on answerable prompts the
  reward terms' value stands and a refusal loses ``penalty`` (a flat penalty, the simplest reading).
- A completion refuses when it is the refusal string (case and surrounding space/punctuation
  ignored) or matches one of ``patterns`` (plain-English "I don't know" forms, as the ternary
  abstention reward); forced rows are refusals by construction.
- Forcing replaces rollouts, so the group stays G rows; it happens only when the natural group has
  fewer than ``min_refusals`` refusals (a group that refuses on its own already has signal).
- The forced tokens are trained as if sampled (their old log-probs are the current policy's);
  the second, reasoning stage of RC-GRPO is out of scope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.core.chat import completion_text
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.rewards.ternary_abstention import ABSTAIN
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy, completion_like

KIND = "forced_refusal"
TRUE = {"true", "yes", "1", "y"}


def refusal_rewards(
    rewards: torch.Tensor,
    unanswerable: torch.Tensor,
    refused: torch.Tensor,
    refusal_reward: float,
    answer_reward: float,
    penalty: float,
) -> torch.Tensor:
    """rewards [N], unanswerable [N] bool, refused [N] bool -> r' [N] (formula in the module docstring)."""
    on_unanswerable = torch.where(refused, refusal_reward, answer_reward).to(rewards.dtype)
    on_answerable = rewards - penalty * refused.to(rewards.dtype)
    return torch.where(unanswerable, on_unanswerable, on_answerable)


def is_true(value: Any) -> bool:
    return value is True or (not isinstance(value, bool) and str(value).strip().lower() in TRUE)


@ROLLOUTS.register("forced_refusal")
class ForcedRefusal(RolloutStrategy):
    """RC-GRPO: force refusals into groups of unanswerable prompts; penalize refusing answerable ones."""

    reward_adjustment = "absolute"  # refusal_reward / answer_reward: values on one reward's scale

    @dataclass(frozen=True)
    class Config:
        unanswerable_column: str = "unanswerable"  # data column, true for a prompt with no valid answer
        refusal: str = "None"  # the refusal string forced into rollouts (RC-GRPO's "None")
        patterns: list[str] = field(default_factory=lambda: list(ABSTAIN))  # regexes that also count as refusing
        # refusals each unanswerable group holds after forcing (1 <= k < G)
        min_refusals: Annotated[int, Range(ge=1)] = 1
        refusal_reward: Annotated[float, Range()] = 1.0  # reward of a refusal on an unanswerable prompt
        answer_reward: Annotated[float, Range()] = 0.0  # reward of any other completion on an unanswerable prompt
        # lambda: subtracted from a refusal's reward on an answerable prompt
        penalty: Annotated[float, Range(ge=0)] = 0.5

        def __post_init__(self):
            if not self.refusal.strip():
                raise ValueError("refusal must be a non-empty string")
            if self.min_refusals < 1 or self.penalty < 0 or not self.answer_reward < self.refusal_reward:
                raise ValueError("need min_refusals >= 1, penalty >= 0 and answer_reward < refusal_reward")
            for p in self.patterns:
                try:
                    re.compile(p)
                except re.error as err:
                    raise ValueError(f"patterns: bad regex {p!r}: {err}") from None

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.patterns = [re.compile(p, re.IGNORECASE) for p in cfg.patterns]
        self._norm_refusal = self._norm(cfg.refusal)

    def check_run(self, run: Any) -> None:
        g = run.settings.train.num_generations
        if self.cfg.min_refusals >= g:
            raise ConfigError(
                f"algorithm.rollout.min_refusals={self.cfg.min_refusals} must be smaller than "
                f"train.num_generations={g}: the group needs sampled rollouts too."
            )

    @staticmethod
    def _norm(text: str) -> str:
        return re.sub(r"[\s.!\"'`*]+", " ", text).strip().lower()

    def refuses(self, completion: Any) -> bool:
        text = completion_text(completion)
        return self._norm(text) == self._norm_refusal or any(p.search(text) for p in self.patterns)

    def unanswerable(self, row: dict) -> bool:
        col = self.cfg.unanswerable_column
        if col not in row:
            raise KeyError(
                f"rollout 'forced_refusal' reads the data column {col!r}, which the batch lacks. "
                f"Columns present: {', '.join(sorted(row))}. Set algorithm.rollout.unanswerable_column."
            )
        return is_true(row[col])

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        out = ctx.generate(prompts)
        ids = ctx.completion_ids(self.cfg.refusal)
        forced, groups = 0, 0
        for group in ctx.groups(len(out)):
            if not self.unanswerable(ctx.rows[group[0]]):
                continue
            groups += 1
            refused = {i for i in group if self.refuses(out.completions[i])}
            need = self.cfg.min_refusals - len(refused)
            for i in [i for i in reversed(group) if i not in refused][: max(need, 0)]:
                out.force(i, ids, completion_like(self.cfg.refusal, out.completions[i]), KIND)
                forced += 1
        ctx.log("forced_refusal/unanswerable_groups", groups)
        ctx.log("forced_refusal/forced", forced)
        return out

    def adjust_rewards(
        self, rewards: torch.Tensor, kinds: list[str], rows: list[dict], completions: list, group_size: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N] -> r' [N]; logs the over-refusal rate on answerable prompts."""
        device = rewards.device
        u = torch.tensor([self.unanswerable(r) for r in rows], dtype=torch.bool, device=device)
        ref = torch.tensor([self.refuses(c) for c in completions], dtype=torch.bool, device=device)
        natural = torch.tensor([k != KIND for k in kinds], dtype=torch.bool, device=device)
        out = refusal_rewards(rewards, u, ref, self.cfg.refusal_reward, self.cfg.answer_reward, self.cfg.penalty)
        nan = float("nan")
        metrics = {
            "forced_refusal/over_refusal_rate": ref[~u].float().mean().item() if (~u).any() else nan,
            "forced_refusal/natural_refusal_rate": ref[u & natural].float().mean().item()
            if (u & natural).any()
            else nan,
            "forced_refusal/unanswerable_frac": u.float().mean().item(),
        }
        return out, metrics
