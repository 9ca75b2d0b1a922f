"""``routed``: ALPO, acoustic-lexical decoupled policy optimization (seed 000 #11), on text.

Each reward term gets its own group advantage, and each advantage is routed only to the tokens of
its own span of the completion (the paper's text vs speech tokens become text regions here)::

    A^j_i     = w_j * GroupNorm(R[:, j])_i                         per term, independently
    A_{i,t}   = sum_{routes (j, span): t in span_i} A^j_i          token t of completion i   [N, T]
              = GroupNorm(r)_i   (unrouted: combined)  or 0  (unrouted: zero)   for a token in no span

Spans are ``tag:NAME``, ``re:REGEX``, ``rest`` (tokens in no tag/re span of any route) or ``all``
(rlpost/advantages/spans.py); e.g. the format term on ``tag:think`` and correctness on ``rest``.

Choices where the abstract is silent:
- "Independent advantages" are GRPO advantages of each reward column on its own (group mean and
  std per column), times the term's weight, so a weighted-down bonus stays small on its tokens.
- Token subsets come from the decoded text (``requires={"token_text"}``): text-only, as METHODS.md
  says; a token belongs to a span when its characters overlap a match.
- A token in two routes' spans gets the sum of both advantages (each reward credits its tokens);
  a token in none gets the combined reward's GRPO advantage by default, so nothing is left without
  signal by a span that failed to match (e.g. a completion without ``<think>``).
- Metrics: ``routed/<term>_token_frac`` (fraction of valid tokens that carry the term's advantage)
  and ``routed/unrouted_token_frac``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch, term_index
from rlpost.advantages.group_norm import GroupNorm
from rlpost.advantages.spans import compile_span, require_text, span_mask
from rlpost.advantages.term_advantage import term_advantages
from rlpost.core.schema import Range


@dataclass(frozen=True)
class Route:
    term: str  # reward term whose advantage this route carries
    span: str  # tag:NAME | re:REGEX | rest | all


@ADVANTAGES.register("routed")
class Routed(Advantage):
    """Per-reward GRPO advantages, each routed to its own token span (tags or regex) [N, T]."""

    seed = "seed 000 #11"
    requires = frozenset({"token_text"})

    @dataclass(frozen=True)
    class Config:
        routes: list[Route] = field(default_factory=lambda: [Route("math_answer", "all")])  # (term, span) pairs
        unrouted: Literal["combined", "zero"] = "combined"  # advantage of tokens in no route's span
        scale: Literal["group", "batch", "none"] = "group"  # per-term advantage: group_norm's std scaling
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to the std before dividing

        def __post_init__(self) -> None:
            if not self.routes:
                raise ValueError("routes is empty: give at least one {term, span}")
            for i, route in enumerate(self.routes):
                try:
                    compile_span(route.span)
                except ValueError as err:
                    raise ValueError(f"routes[{i}].span: {err}") from None
            if self.unrouted not in ("combined", "zero"):
                raise ValueError(f"Unknown unrouted {self.unrouted!r}. Valid choices: combined, zero.")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.base = GroupNorm(GroupNorm.Config(scale=self.cfg.scale, eps=self.cfg.eps))
        self.patterns = [compile_span(r.span) for r in self.cfg.routes]
        self.index: list[int] | None = None  # column of each route's term
        self.weights: torch.Tensor | None = None  # [R] reward term weights

    def bind(self, names: list[str], weights: torch.Tensor | None = None) -> None:
        self.index = [
            term_index(names, r.term, f"algorithm.advantage.routes[{i}].term") for i, r in enumerate(self.cfg.routes)
        ]
        self.weights = weights

    def check_run(self, run: Any) -> None:
        self.bind(run.reward.names, run.reward.weights)

    def masks(self, pieces: list[str], width: int) -> torch.Tensor:
        """pieces [T] -> bool [routes, width]: the tokens each route's span covers."""
        found = [None if p is None else span_mask(pieces, p)[:width] for p in self.patterns]
        explicit = torch.zeros(width, dtype=torch.bool)
        for m in found:
            if m is not None:
                explicit |= m
        out = []
        for route, m in zip(self.cfg.routes, found):
            out.append(
                m if m is not None else (~explicit if route.span == "rest" else torch.ones(width, dtype=torch.bool))
            )
        return torch.stack(out)

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """reward_terms [N, R], token_text [N][T], completion_mask [N, T] -> advantages [N, T], metrics."""
        if self.index is None:
            raise RuntimeError("routed: bind(names) was not called (build_run does it)")
        texts = require_text(batch, "routed")
        mask = batch.completion_mask > 0
        n, width = mask.shape
        per_term = term_advantages(batch, self.base, self.weights)  # [N, R]
        combined, metrics = self.base(batch)
        routes = torch.stack([self.masks(texts[i], width) for i in range(n)], dim=1).to(mask.device)  # [routes, N, T]
        advantages = torch.zeros(n, width, device=mask.device)
        for k, j in enumerate(self.index):
            advantages = advantages + routes[k] * per_term[:, j : j + 1]
        unrouted = ~routes.any(0)
        if self.cfg.unrouted == "combined":
            advantages = torch.where(unrouted, combined.unsqueeze(1).expand(n, width), advantages)
        valid = mask.sum().clamp(min=1)
        for k, route in enumerate(self.cfg.routes):
            metrics[f"routed/{route.term}_token_frac"] = float((routes[k] & mask).sum() / valid)
        metrics["routed/unrouted_token_frac"] = float((unrouted & mask).sum() / valid)
        token_adv = advantages[mask]
        metrics.update(
            {
                "advantage/mean": float(token_adv.mean()) if token_adv.numel() else 0.0,
                "advantage/std": float(token_adv.std()) if token_adv.numel() > 1 else 0.0,
                "advantage/abs_mean": float(token_adv.abs().mean()) if token_adv.numel() else 0.0,
            }
        )
        return advantages, metrics

    def describe(self) -> str:
        routes = ", ".join(f"{r.term} -> {r.span}" for r in self.cfg.routes)
        return f"A[i, t] = sum of w_j GroupNorm(R_j)_i over the routes whose span holds token t ({routes}); else {self.cfg.unrouted}"
