"""``tiar``: Trajectory-Informed Abstention Reweighting (seed 004 #7).

GRPO on a ternary reward (correct / abstain / wrong, ``reward=ternary_abstention``) whose abstention
value is set per group from the group's own trajectories, read as the policy's confidence::

    c_g      = n_correct / G                      ("correct_frac")
             = n_correct / (n_correct + n_wrong)  ("answered_accuracy"; 0 when nothing was answered)
    a_g      = unsure + (sure - unsure) * c_g     abstention reward of group g (linear in c_g)
    r'_i     = r_i + w * (a_g - abstain)          on abstaining rows (w = the term's weight), r_i elsewhere
    A_i      = GroupNorm(r')_i

So abstaining pays where the policy does not know the answer (c = 0: a = ``unsure``, 0.5 by default,
above the static 0) and costs where it does (c = 1: a = ``sure``, -0.5); at c = 1/2 it is the static
ternary reward. With unsure = sure = the reward's own abstain value, TIAR is GRPO on the ternary reward.

Choices where the abstract is silent:
- "Trajectories as a confidence indicator": the fraction of the group's G trajectories that are
  correct (the policy's empirical success rate on this query); ``answered_accuracy`` counts only
  trajectories that answered. The reward's values (correct / abstain / wrong) are read from the
  ``ternary_abstention`` term itself, so the two configs cannot disagree.
- The re-weighting is linear in the confidence; its end points are config fields.
- Applied to the combined reward by adding the change of the term's weighted contribution, which
  is exact for ``reward.combine=weighted_sum`` (required).
- Metrics: ``tiar/abstain_frac``, ``tiar/confidence_mean``, ``tiar/abstain_reward_mean`` (mean a_g
  over abstaining rows, 0 when none abstained).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch, term_index
from rlpost.advantages.group_norm import GroupNorm
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


@ADVANTAGES.register("tiar")
class TIAR(Advantage):
    """GRPO on a ternary reward whose abstention value follows the group's confidence (TIAR)."""

    seed = "seed 004 #7"

    @dataclass(frozen=True)
    class Config:
        term: str = "ternary_abstention"  # the reward term holding the ternary reward
        confidence: Literal["correct_frac", "answered_accuracy"] = "correct_frac"  # how c_g is read from the group
        unsure: Annotated[float, Range()] = 0.5  # abstention reward when the group is never correct (c = 0)
        sure: Annotated[float, Range()] = -0.5  # abstention reward when the group is always correct (c = 1)
        scale: Literal["group", "batch", "none"] = "group"  # group_norm's std scaling
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to the std

        def __post_init__(self) -> None:
            if self.confidence not in ("correct_frac", "answered_accuracy"):
                raise ValueError(
                    f"Unknown confidence {self.confidence!r}. Valid choices: correct_frac, answered_accuracy."
                )

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.base = GroupNorm(GroupNorm.Config(scale=self.cfg.scale, eps=self.cfg.eps))
        self.index: int | None = None
        self.weight = 1.0
        self.values = (1.0, 0.0, -1.0)  # (correct, abstain, wrong) of the ternary term

    def bind(self, names: list[str], funcs: list, weights: torch.Tensor) -> None:
        j = term_index(names, self.cfg.term, "algorithm.advantage.term")
        func = funcs[j]
        if func.registry_name != "ternary_abstention":
            raise ConfigError(
                f"algorithm.advantage.term={self.cfg.term!r} must be a ternary_abstention reward "
                f"(it is {func.registry_name!r})."
            )
        self.index, self.weight = j, float(weights[j])
        self.values = (func.cfg.correct, func.cfg.abstain, func.cfg.wrong)

    def check_run(self, run: Any) -> None:
        combine = type(run.reward.combine).registry_name
        if combine != "weighted_sum":
            raise ConfigError(f"algorithm.advantage=tiar needs reward.combine=weighted_sum (got {combine}).")
        self.bind(run.reward.names, run.reward.funcs, run.reward.weights)

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], reward_terms [N, R] -> advantages [N], metrics."""
        if self.index is None:
            raise RuntimeError("tiar: bind(...) was not called (build_run does it)")
        cfg, g = self.cfg, batch.num_generations
        correct_v, abstain_v, _ = self.values
        t = batch.reward_terms[:, self.index].float().view(-1, g)
        correct, abstain = t == correct_v, t == abstain_v
        answered = (correct | (t < abstain_v)).sum(1).float()
        if cfg.confidence == "correct_frac":
            conf = correct.sum(1).float() / g
        else:
            conf = torch.where(answered > 0, correct.sum(1).float() / answered.clamp(min=1), torch.zeros_like(answered))
        a_g = cfg.unsure + (cfg.sure - cfg.unsure) * conf  # [N/G]
        delta = torch.where(abstain, self.weight * (a_g.unsqueeze(1) - abstain_v), torch.zeros_like(t))
        rewards = batch.rewards.float() + delta.reshape(-1).to(batch.rewards.device)
        advantages, metrics = self.base(replace(batch, rewards=rewards))
        n_abs = int(abstain.sum())
        metrics.update(
            {
                "tiar/abstain_frac": float(abstain.float().mean()),
                "tiar/confidence_mean": float(conf.mean()),
                "tiar/abstain_reward_mean": float(a_g.unsqueeze(1).expand_as(t)[abstain].mean()) if n_abs else 0.0,
            }
        )
        return advantages, metrics

    def describe(self) -> str:
        c = self.cfg
        return (
            f"A = GroupNorm(r'), r' = r with the abstention value {c.unsure:g} + ({c.sure:g} - {c.unsure:g}) c_g, "
            f"c_g = {c.confidence} of the group"
        )
