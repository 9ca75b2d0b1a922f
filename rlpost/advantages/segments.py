"""``segments``: StructPO's struct-aware credit assignment (seed 000 #10).

A completion is split into stages at explicit stage tokens (marker strings such as ``<think>``,
``<answer>``); the global coherence advantage goes to every token, and each stage's local quality
advantage only to that stage's tokens::

    A^glob_i   = GroupNorm(sum_{j in global} w_j R[:, j])_i          whole-completion coherence
    A^s_i      = w_j(s) * GroupNorm(R[:, j(s)])_i                    local quality of stage s
    A_{i,t}    = global_weight * A^glob_i + local_weight * A^{stage(t)}_i                     [N, T]

where stage(t) is the stage token t lies in; tokens before the first marker, and stages without a
local term, get the global part only. With no local terms this is GRPO on the global terms.

Choices where the abstract is silent:
- Stage quality is scored by ordinary reward terms (or reward columns) the user maps to stages
  (``local``); the global terms default to every term not used locally. Their advantages are GRPO
  advantages of their own columns, as in ``routed``. "Local stage quality" means a term that reads
  the stage's own text: ``reward=stage_check`` gives one such column per stage
  (``stage_check/<tag>``, ``recipe=structpo`` on ``data=staged_arith``). A whole-completion term
  mapped to a stage (the conf default, ``math_answer`` on ``<answer>``) only moves where its credit
  lands, and a completion without that marker then gets none of it: keep such a term global.
- A stage runs from an occurrence of its marker to the next occurrence of any marker (stages are
  contiguous and cover the rest of the completion; the marker's own tokens belong to it); a marker
  that occurs twice opens its stage twice. Found from the decoded text (``requires={"token_text"}``).
- "Refinement-guided optimization" (internalizing revisions) is a rollout strategy, not this estimator.
- Metrics: ``segments/local_token_frac`` (valid tokens that carry a local advantage),
  ``segments/stages_found_mean`` (distinct stages per completion), ``segments/global_abs_mean``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch, nan_weighted_sum, term_index
from rlpost.advantages.group_norm import GroupNorm, group_advantage
from rlpost.advantages.spans import require_text, stage_index
from rlpost.advantages.term_advantage import term_advantages
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


@dataclass(frozen=True)
class StageTerm:
    stage: str  # a marker from stages
    term: str  # reward term scoring that stage's local quality


@ADVANTAGES.register("segments")
class Segments(Advantage):
    """Global coherence advantage on every token plus each stage's local advantage on its own tokens [N, T]."""

    seed = "seed 000 #10"
    requires = frozenset({"token_text"})

    @dataclass(frozen=True)
    class Config:
        stages: list[str] = field(default_factory=lambda: ["<think>", "<answer>"])  # stage marker strings
        local: list[StageTerm] = field(default_factory=list)  # (stage, term): local quality terms
        global_terms: list[str] | None = None  # coherence terms; null = every term not used in local
        global_weight: Annotated[float, Range(ge=0)] = 1.0  # weight of the global advantage
        local_weight: Annotated[float, Range(ge=0)] = 1.0  # weight of a stage's local advantage
        scale: Literal["group", "batch", "none"] = "group"  # group_norm's std scaling of every part
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to the std before dividing

        def __post_init__(self) -> None:
            if not self.stages or any(not s for s in self.stages):
                raise ValueError("stages must be a non-empty list of non-empty marker strings")
            for i, item in enumerate(self.local):
                if item.stage not in self.stages:
                    raise ValueError(f"local[{i}].stage={item.stage!r} is not in stages {list(self.stages)}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.base = GroupNorm(GroupNorm.Config(scale=self.cfg.scale, eps=self.cfg.eps))
        self.local: dict[int, int] | None = None  # stage index -> term column
        self.global_cols: list[int] = []
        self.weights: torch.Tensor | None = None

    def bind(self, names: list[str], weights: torch.Tensor | None = None) -> None:
        cfg = self.cfg
        self.local = {
            cfg.stages.index(x.stage): term_index(names, x.term, f"algorithm.advantage.local[{i}].term")
            for i, x in enumerate(cfg.local)
        }
        if cfg.global_terms is None:
            self.global_cols = [j for j in range(len(names)) if j not in self.local.values()]
        else:
            self.global_cols = [term_index(names, t, "algorithm.advantage.global_terms") for t in cfg.global_terms]
        if not self.global_cols:
            raise ConfigError(
                "algorithm.advantage.global_terms is empty (every term is a local term): name the coherence terms."
            )
        self.weights = weights

    def check_run(self, run: Any) -> None:
        self.bind(run.reward.names, run.reward.weights)

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """reward_terms [N, R], token_text [N][T], completion_mask [N, T] -> advantages [N, T], metrics."""
        if self.local is None:
            raise RuntimeError("segments: bind(names) was not called (build_run does it)")
        cfg, g = self.cfg, batch.num_generations
        texts = require_text(batch, "segments")
        mask = batch.completion_mask > 0
        n, width = mask.shape
        r = batch.reward_terms.size(1)
        w = torch.ones(r) if self.weights is None else self.weights.float()
        cols = self.global_cols
        glob = group_advantage(nan_weighted_sum(batch.reward_terms[:, cols].float(), w[cols]), g, cfg.scale, cfg.eps)
        glob = glob.nan_to_num(0.0)
        per_term = term_advantages(batch, self.base, w)  # [N, R]
        stage = torch.stack([stage_index(texts[i], list(cfg.stages))[:width] for i in range(n)]).to(mask.device)
        local = torch.zeros(n, width, device=mask.device)
        for s, j in self.local.items():
            local = local + (stage == s) * per_term[:, j : j + 1]
        advantages = cfg.global_weight * glob.unsqueeze(1) + cfg.local_weight * local
        has_local = torch.zeros_like(mask)
        for s in self.local:
            has_local |= stage == s
        valid = mask.sum().clamp(min=1)
        found = [len(set(stage[i][mask[i]].tolist()) - {-1}) for i in range(n)]
        token_adv = advantages[mask]
        metrics = {
            "segments/local_token_frac": float((has_local & mask).sum() / valid),
            "segments/stages_found_mean": sum(found) / max(n, 1),
            "segments/global_abs_mean": float(glob.abs().mean()),
            "advantage/mean": float(token_adv.mean()) if token_adv.numel() else 0.0,
            "advantage/std": float(token_adv.std()) if token_adv.numel() > 1 else 0.0,
            "advantage/abs_mean": float(token_adv.abs().mean()) if token_adv.numel() else 0.0,
        }
        return advantages, metrics

    def describe(self) -> str:
        local = ", ".join(f"{x.term} on {x.stage}" for x in self.cfg.local) or "none"
        return (
            f"A[i, t] = {self.cfg.global_weight:g} GroupNorm(global terms)_i + {self.cfg.local_weight:g} "
            f"w_j GroupNorm(R_j)_i of the stage holding t (stages {list(self.cfg.stages)}; local: {local})"
        )
