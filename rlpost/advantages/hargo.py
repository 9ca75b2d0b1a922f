"""``hargo``: Heterogeneity-Aware Reward-Guided Optimization (seed 000 #14).

Per-response importance weights from a confidence-modulated advantage, with no task labels::

    A_i   = GroupNorm(r)_i                                            GRPO advantage
    D_g   = min(1, (max_g r - min_g r) / reward_range)                discrimination: group reward contrast
    C_i   = exp(mean_t log pi_ref(y_{i,t}))                           confidence: reference per-token prob (geo. mean)
    m_i   = 1 - C_i  if A_i > 0,   C_i  if A_i < 0,   0 if A_i = 0    confidence-modulated signal
    w_i   = G * softmax_{j in g}(D_g * m_j / temperature)_i           per-response weights, mean 1 per group
    A'_i  = w_i * A_i

So in a group that discriminates (D > 0), surprising successes (low reference confidence, A > 0)
and confident failures (high confidence, A < 0) get more weight, and unsurprising ones less; a
group without contrast (D = 0) or with equal signals keeps GRPO's uniform weights. The weights are
a softmax over the group, so they are positive and average 1: the group's total weight is GRPO's.

Choices where the abstract is silent:
- Discrimination = the group's reward range over a fixed ``reward_range`` (1 for a 0/1 reward), so
  it compares groups on the reward's own scale; it acts as an inverse temperature of the weights.
- Confidence = geometric-mean token probability of the response under the reference model, as the
  abstract says (``confidence_source: ref``, the default): the trainer loads and scores the
  reference whenever a component reads ``ref_logps``, with or without a KL term (rlpost/run.py,
  ``needs_reference``). ``confidence_source: rollout`` uses the rollout policy's log-probs instead
  (no second model in memory): the reference is the starting policy, and the two agree at step 0.
- The modulation is asymmetric in the sign of A (surprise for successes, confidence for failures),
  the reading under which both signals are "complementary" as the ablation claims.
- Metrics: ``hargo/discrimination_mean``, ``hargo/confidence_mean``, ``hargo/weight_max``,
  ``hargo/weight_std`` (over rows with A != 0), ``hargo/base_abs_mean``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.core.schema import Range


@ADVANTAGES.register("hargo")
class HARGO(Advantage):
    """GRPO advantages reweighted per response by group contrast and reference confidence (HARGO)."""

    seed = "seed 000 #14"

    @dataclass(frozen=True)
    class Config:
        # log-probs of the rollout policy or the reference model
        confidence_source: Literal["rollout", "ref"] = "ref"
        reward_range: Annotated[float, Range(gt=0)] = 1.0  # reward contrast that counts as full discrimination (D = 1)
        temperature: Annotated[float, Range(gt=0)] = 1.0  # softmax temperature of the per-response weights
        scale: Literal["group", "batch", "none"] = "group"  # base advantage: group_norm's std scaling
        eps: Annotated[float, Range(ge=0)] = 1e-4  # base advantage: added to the std

        def __post_init__(self) -> None:
            if self.confidence_source not in ("rollout", "ref"):
                raise ValueError(f"Unknown confidence_source {self.confidence_source!r}. Valid choices: rollout, ref.")
            if self.reward_range <= 0 or self.temperature <= 0:
                raise ValueError("reward_range and temperature must be > 0")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.base = GroupNorm(GroupNorm.Config(scale=self.cfg.scale, eps=self.cfg.eps))
        self.key = "ref_logps" if self.cfg.confidence_source == "ref" else "logps"
        self.requires = frozenset({self.key})

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], extras[logps|ref_logps] [N, T], completion_mask [N, T] -> advantages [N], metrics."""
        if self.key not in batch.extras:
            raise RuntimeError(f"hargo needs batch.extras[{self.key!r}] (the trainer fills it: requires)")
        cfg, g = self.cfg, batch.num_generations
        base, metrics = self.base(batch)
        mask = batch.completion_mask.double()
        logps = batch.extras[self.key][:, : mask.size(1)].double()
        count = mask.sum(1)
        mean_logp = (logps * mask).sum(1) / count.clamp(min=1)
        confidence = torch.where(count > 0, mean_logp.exp(), torch.zeros_like(mean_logp))  # [N]
        r = batch.rewards.double().view(-1, g)
        contrast = (r.nan_to_num(-torch.inf).amax(1) - r.nan_to_num(torch.inf).amin(1)).nan_to_num(0.0)
        discrimination = (contrast.clamp(min=0) / cfg.reward_range).clamp(max=1.0)  # [N/G]; all-NaN -> 0
        a = base.double()
        signal = torch.where(a > 0, 1 - confidence, torch.where(a < 0, confidence, torch.zeros_like(a)))
        logits = (discrimination.repeat_interleave(g) * signal / cfg.temperature).view(-1, g)
        weights = (g * torch.softmax(logits, dim=1)).reshape(-1)
        advantages = (weights * a).to(base.dtype)
        moved = base != 0
        metrics.update(
            {
                "advantage/mean": float(advantages.mean()),
                "advantage/std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
                "advantage/abs_mean": float(advantages.abs().mean()),
                "hargo/base_abs_mean": float(base.abs().mean()),
                "hargo/discrimination_mean": float(discrimination.mean()),
                "hargo/confidence_mean": float(confidence[count > 0].mean()) if (count > 0).any() else 0.0,
                "hargo/weight_max": float(weights[moved].max()) if moved.any() else 1.0,
                "hargo/weight_std": float(weights[moved].std()) if moved.sum() > 1 else 0.0,
            }
        )
        return advantages, metrics

    def describe(self) -> str:
        c = self.cfg
        return (
            f"A = w * GRPO A, w = G softmax_group(D * m / {c.temperature:g}), D = min(1, range(r) / {c.reward_range:g}), "
            f"m = 1 - C (A > 0) or C (A < 0), C = exp(mean token log-prob, {c.confidence_source})"
        )
