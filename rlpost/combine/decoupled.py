"""``decoupled``: CRPO's decoupling of task and style rewards (seed 004 #8).

The reward terms are split into a task part and a style part; each part is summed with the term
weights and group-normalized on its own, and only then are the two advantages added::

    r_task  = sum_{j in task} w_j R[:, j]          r_style = sum_{j in style} w_j R[:, j]
    A_i     = task_weight * GRPO(r_task)_i + style_weight * GRPO(r_style)_i

so a style reward with a large spread cannot drown the task signal (or the reverse) inside one
shared group std. With one part constant in a group, that part contributes 0 and A is the other
part's GRPO advantage. The output is an advantage (``produces``), sent to the loss as is; with
``algorithm/rollout=generic_negative`` the generic response's task and style terms are each set below
the group's natural minimum before the parts are normalized (rlpost/pipeline.py, ``adjust_terms``).

Choices where the abstract is silent:
- "Decoupling task logic from stylistic rewards" is read as separate group normalization per part
  (the standard fix for gradient conflict between reward scales); the two parts are then summed
  with explicit weights (default 1 and 1). ``style_terms`` names the style terms; every other term
  is a task term. Both parts must be non-empty (otherwise there is nothing to decouple).
- CRPO's other two mechanisms are elsewhere: generic negative responses are ``rollout=generic_negative``;
  the character-complexity-adaptive constraint is ``algorithm/loss=adaptive_clip``.
- A part with every term NaN on a row (unscorable) contributes 0 to that row; a row unscorable in
  both parts stays NaN.
- Metrics: ``decoupled/task_abs_mean``, ``decoupled/style_abs_mean`` (mean |advantage| per part)
  and ``decoupled/sign_conflict_frac`` (rows whose two part advantages have opposite signs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import nan_weighted_sum, term_index
from rlpost.advantages.group_norm import group_advantage
from rlpost.combine.base import COMBINERS, Combine
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


@COMBINERS.register("decoupled")
class Decoupled(Combine):
    """Task and style reward terms group-normalized separately, then added (CRPO)."""

    produces = "advantages"
    multi_column = True  # one reward column: the weighted sum up to a factor (rlpost show warns)
    seed = "seed 004 #8"

    @dataclass(frozen=True)
    class Config:
        style_terms: list[str] = field(default_factory=list)  # names of the style terms; the rest are task terms
        task_weight: Annotated[float, Range(ge=0)] = 1.0  # weight of the task part's advantage
        style_weight: Annotated[float, Range(ge=0)] = 1.0  # weight of the style part's advantage
        scale: Literal["group", "none"] = "group"  # per-part advantage: divide by the group std, or not
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to the std before dividing

        def __post_init__(self) -> None:
            if self.scale not in ("group", "none"):
                raise ValueError(f"Unknown scale {self.scale!r}. Valid choices: group, none.")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.style: list[int] | None = None  # column indices, set by bind()

    def bind(self, names: list[str]) -> None:
        if not self.cfg.style_terms:
            raise ConfigError(
                f"reward.combine.style_terms is empty: name the style terms (reward terms: {', '.join(names)})."
            )
        self.style = [term_index(names, t, "reward.combine.style_terms") for t in self.cfg.style_terms]
        if len(set(self.style)) == len(names):
            raise ConfigError(
                f"reward.combine.style_terms={list(self.cfg.style_terms)} covers every reward term: "
                "decoupled needs at least one task term as well."
            )

    def check_run(self, run: Any) -> None:
        self.bind(run.reward.names)

    def __call__(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """reward_terms [N, R], weights [R], G -> task + style advantages [N] (NaN = unscorable)."""
        if self.style is None:
            raise RuntimeError("decoupled: bind(names) was not called (build_run does it)")
        cfg, r = self.cfg, reward_terms.size(1)
        is_style = torch.zeros(r, dtype=torch.bool)
        is_style[self.style] = True
        weights = weights.to(reward_terms.device, torch.float32)
        parts = []
        for cols in (~is_style, is_style):
            part = nan_weighted_sum(reward_terms[:, cols].float(), weights[cols])
            parts.append(group_advantage(part, num_generations, cfg.scale, cfg.eps))
        task, style = parts
        total = cfg.task_weight * task.nan_to_num(0.0) + cfg.style_weight * style.nan_to_num(0.0)
        total = total.masked_fill(torch.isnan(task) & torch.isnan(style), float("nan"))
        conflict = (task * style) < 0
        metrics = {
            "decoupled/task_abs_mean": float(task.nan_to_num(0.0).abs().mean()),
            "decoupled/style_abs_mean": float(style.nan_to_num(0.0).abs().mean()),
            "decoupled/sign_conflict_frac": float(conflict.float().mean()),
        }
        return total, metrics

    def describe(self) -> str:
        c = self.cfg
        return f"A = {c.task_weight:g} GRPO(task terms) + {c.style_weight:g} GRPO(style terms {list(c.style_terms)})"
