"""``tiar``: Trajectory-Informed Abstention advantage Reweighting (seed 004 #7).

GRPO on a ternary reward (correct / abstain / wrong, ``reward=ternary_abstention``) whose *abstention
advantage* is re-weighted per group by the policy's confidence on the query, read from the group's own
G trajectories::

    A_i  = GroupNorm(r)_i                                   GRPO's advantage: the static ternary baseline
    c_g  = n_correct / G                                    ("correct_frac")
         = n_correct / (n_correct + n_wrong)                ("answered_accuracy"; 0 when nothing was answered)
    d_g  = (pivot - c_g) / max(pivot, 1 - pivot)            in [-1, 1]: unsure (> 0) or sure (< 0) of the answer
    A'_i = A_i + strength * d_g * |A_i|                     on abstaining rows i;  A'_i = A_i elsewhere
         = A_i * (1 + strength * sign(A_i) * d_g)

So an abstention that beat its group (A > 0: the others were mostly wrong) is reinforced more where
the policy does not know the answer (c < pivot) and less where it does; an abstention that lost to
its group (A < 0: others got it right) is punished more where the policy knows the answer and less
where it does not. In a group that is never correct (abstain / wrong only: c = 0, d = 1), every
abstention advantage is multiplied by 1 + strength (2 by default), which GRPO cannot express: any
change of the abstention *reward* in a two-level group is affine and erased by the std
normalisation. At c = pivot, or with strength 0, TIAR is GRPO on the ternary reward.

Choices where the abstract is silent:
- "Trajectories as a confidence indicator": the fraction of the group's G trajectories that are
  correct (the policy's empirical success rate on this query); ``answered_accuracy`` counts only
  trajectories that answered. The reward's values (correct / abstain / wrong) are read from the
  ``ternary_abstention`` term itself, so the two configs cannot disagree. On an unanswerable row
  (the reward's ``unanswerable_column``) an abstention *is* the correct answer: it scores ``correct``,
  counts as correct in c_g and is not re-weighted (nothing to abstain from).
- The re-weighting is multiplicative on the advantage and linear in the confidence, sign-aware so that
  both directions push towards "abstain iff unsure"; ``pivot`` (the confidence at which abstaining is
  neutral, 1/2) and ``strength`` (1: weights in [0, 2]) are config fields. Only abstaining rows move,
  so a group's advantages no longer sum to 0 (as in the abstract: the abstention advantage is what is
  re-weighted).
- The base advantage is group_norm's (``scale``, ``eps``) on the combined reward; the reward must be
  a weighted sum (``reward.combine=weighted_sum``), so an abstention's reward is what the term says.
- Metrics: ``tiar/abstain_frac``, ``tiar/confidence_mean``, ``tiar/abstain_weight_mean`` (mean
  A'/A over abstaining rows with A != 0; 1 when there is none), ``tiar/abstain_adv_mean`` (mean A' of
  abstaining rows, 0 when none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch, advantage_metrics, term_index
from rlpost.advantages.group_norm import GroupNorm
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


def confidence(t: torch.Tensor, correct_v: float, abstain_v: float, how: str) -> torch.Tensor:
    """Ternary term values [N/G, G] -> the group's confidence c_g [N/G] (module docstring)."""
    correct = (t == correct_v).sum(1).float()
    if how == "correct_frac":
        return correct / t.size(1)
    answered = (t != abstain_v).sum(1).float() - torch.isnan(t).sum(1).float()
    return torch.where(answered > 0, correct / answered.clamp(min=1), torch.zeros_like(answered))


def reweight(advantages: torch.Tensor, abstain: torch.Tensor, d: torch.Tensor, strength: float) -> torch.Tensor:
    """A [N/G, G], abstain [N/G, G] bool, d [N/G] -> A' = A + strength * d * |A| on abstaining rows."""
    return torch.where(abstain, advantages + strength * d.unsqueeze(1) * advantages.abs(), advantages)


@ADVANTAGES.register("tiar")
class TIAR(Advantage):
    """GRPO on a ternary reward with each abstention's advantage re-weighted by the group's confidence (TIAR)."""

    seed = "seed 004 #7"

    @dataclass(frozen=True)
    class Config:
        term: str = "ternary_abstention"  # the reward term holding the ternary reward
        confidence: Literal["correct_frac", "answered_accuracy"] = "correct_frac"  # how c_g is read from the group
        pivot: Annotated[float, Range(gt=0, lt=1)] = 0.5  # confidence at which an abstention keeps GRPO's advantage
        strength: Annotated[float, Range(ge=0, le=1)] = 1.0  # 0 = GRPO; 1: abstention weights in [0, 2]
        scale: Literal["group", "batch", "none"] = "group"  # group_norm's std scaling of the base advantage
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
        self.values = (1.0, 0.0, -1.0)  # (correct, abstain, wrong) of the ternary term

    def bind(self, names: list[str], funcs: list) -> None:
        j = term_index(names, self.cfg.term, "algorithm.advantage.term")
        func = funcs[j]
        if func.registry_name != "ternary_abstention":
            raise ConfigError(
                f"algorithm.advantage.term={self.cfg.term!r} must be a ternary_abstention reward "
                f"(it is {func.registry_name!r})."
            )
        self.index = j
        self.values = (func.cfg.correct, func.cfg.abstain, func.cfg.wrong)

    def check_run(self, run: Any) -> None:
        combine = type(run.reward.combine).registry_name
        if combine != "weighted_sum":
            raise ConfigError(f"algorithm.advantage=tiar needs reward.combine=weighted_sum (got {combine}).")
        self.bind(run.reward.names, run.reward.funcs)

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], reward_terms [N, R] -> advantages [N], metrics."""
        if self.index is None:
            raise RuntimeError("tiar: bind(...) was not called (build_run does it)")
        cfg, g = self.cfg, batch.num_generations
        correct_v, abstain_v, _ = self.values
        t = batch.reward_terms[:, self.index].float().view(-1, g)  # [N/G, G]
        abstain = t == abstain_v
        conf = confidence(t, correct_v, abstain_v, cfg.confidence)  # [N/G]
        d = (cfg.pivot - conf) / max(cfg.pivot, 1 - cfg.pivot)  # [N/G]
        base, metrics = self.base(batch)  # [N]
        grouped = base.view(-1, g).to(t.device)
        advantages = reweight(grouped, abstain, d, cfg.strength)
        moved = abstain & (grouped != 0)
        out = advantages.reshape(-1).to(base.device)
        metrics.update(
            {
                **advantage_metrics(out),
                "tiar/abstain_frac": float(abstain.float().mean()),
                "tiar/confidence_mean": float(conf.mean()),
                "tiar/abstain_weight_mean": float((advantages[moved] / grouped[moved]).mean()) if moved.any() else 1.0,
                "tiar/abstain_adv_mean": float(advantages[abstain].mean()) if abstain.any() else 0.0,
            }
        )
        return out, metrics

    def describe(self) -> str:
        c = self.cfg
        return (
            f"A = GroupNorm(r); on abstaining rows A += {c.strength:g} d_g |A|, d_g = ({c.pivot:g} - c_g) / "
            f"{max(c.pivot, 1 - c.pivot):g}, c_g = {c.confidence} of the group"
        )
