"""``adaptive_clip``: CRPO's character-complexity-adaptive constraint (seed 004 #8).

CRPO "dynamically adapts optimization constraints based on character complexity". rlpost's reading:
the constraint is the PPO clip range, set per completion from the complexity ``c`` in [0, 1] of the
character its prompt asks for::

    s_i   = min_scale + (max_scale - min_scale) * c_i                 the row's scale of the trust region
    r_t   = exp(log pi(y_t) - log pi_old(y_t))
    l_t   = -min(r_t * A, clip(r_t, 1 - s_i * epsilon_low, 1 + s_i * epsilon_high) * A)     [B, T]

    c_i   = the data column ``complexity_column`` (clipped to [0, 1]), or, when it is null,
            min(1, distinct words of ``profile_column`` / ``words_for_full``)

Choices where the abstract is silent:
- The constraint adapted is the clip range (the trust region the GRPO family already has); a complex
  character gets the wider one (``max_scale`` 1.5 by default, so 0.3 at epsilon 0.2): its distinctive
  style lies further from the base model's generic distribution, which CRPO says RL drifts back to;
  a simple character gets the tighter one (``min_scale`` 0.5), where a small move already fits it.
- Complexity without a column is the profile's vocabulary size (distinct lowercased words of at least
  3 letters), saturating at ``words_for_full``: a profile with more distinct traits to keep is more
  complex. A row missing the column (or with an empty profile) counts as c = 0.5 (the middle).
- Everything else is ``clip``'s (rlpost/losses/clip.py): TRL's clip metrics, token-level ratio.
  Logged: ``adaptive_clip/complexity_mean``, ``adaptive_clip/epsilon_high_mean`` (the batch's mean range) and
  ``adaptive_clip/epsilon_high_std`` (its spread over the rows: 0 when every row has the same complexity).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Annotated, Any

import torch

from rlpost.core.component import ScoringInputs
from rlpost.core.schema import Range
from rlpost.losses.base import COMPLEXITY, LOSSES, LossInputs, PolicyLoss
from rlpost.losses.clip import as_2d, clipped_surrogate

COMPLEXITY_KEY = COMPLEXITY  # [B] per-row complexity in [0, 1], added at scoring time (rlpost/losses/base.py)
_WORD = re.compile(r"[^\W\d_]{3,}")


def profile_complexity(text: str, words_for_full: int) -> float:
    """min(1, distinct lowercased words of >= 3 letters / words_for_full); 0.5 for an empty profile."""
    words = {w.lower() for w in _WORD.findall(text or "")}
    return min(1.0, len(words) / words_for_full) if words else 0.5


@LOSSES.register("adaptive_clip")
class AdaptiveClip(PolicyLoss):
    """CRPO: the clipped surrogate with a per-completion clip range scaled by character complexity."""

    seed = "seed 004 #8"

    @dataclass(frozen=True)
    class Config:
        epsilon_low: Annotated[float, Range(ge=0, lt=1)] = 0.2  # lower clip at scale 1: r >= 1 - s * epsilon_low
        epsilon_high: Annotated[float, Range(ge=0)] = 0.2  # upper clip at scale 1: r <= 1 + s * epsilon_high
        min_scale: Annotated[float, Range(gt=0)] = 0.5  # s of the simplest character (c = 0)
        max_scale: Annotated[float, Range(gt=0)] = 1.5  # s of the most complex character (c = 1)
        complexity_column: str | None = None  # a data column with c in [0, 1]; null = from profile_column
        profile_column: str = "question"  # the data column describing the character (its text)
        words_for_full: Annotated[int, Range(ge=1)] = 60  # distinct profile words that count as c = 1

        def __post_init__(self) -> None:
            if self.min_scale > self.max_scale:
                raise ValueError(f"min_scale={self.min_scale} must be <= max_scale={self.max_scale}")
            if self.max_scale * self.epsilon_low >= 1:
                raise ValueError(
                    f"max_scale * epsilon_low = {self.max_scale * self.epsilon_low:g} must be < 1 (r >= 1 - s * eps)"
                )

    def complexity(self, row: dict[str, Any]) -> float:
        """One dataset row -> c in [0, 1] (module docstring)."""
        c = self.cfg
        if c.complexity_column is not None:
            value = row.get(c.complexity_column)
            return 0.5 if value is None else min(1.0, max(0.0, float(value)))
        return profile_complexity(str(row.get(c.profile_column) or ""), c.words_for_full)

    def score_rollouts(self, x: ScoringInputs) -> dict[str, torch.Tensor]:
        """This process's rows -> {COMPLEXITY_KEY: c [B]} for the loss batch."""
        device = x.output["completion_ids"].device
        return {COMPLEXITY_KEY: torch.tensor([self.complexity(r) for r in x.rows], device=device)}

    def scales(self, complexity: torch.Tensor) -> torch.Tensor:
        """c [B] -> s [B, 1]."""
        c = self.cfg
        return (c.min_scale + (c.max_scale - c.min_scale) * complexity.float()).unsqueeze(1)

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps [B, T], advantages, batch[COMPLEXITY_KEY] [B] -> per-token loss [B, T], metrics."""
        if COMPLEXITY_KEY not in x.batch:
            raise RuntimeError(f"adaptive_clip needs batch[{COMPLEXITY_KEY!r}] (its score_rollouts adds it)")
        complexity = x.batch[COMPLEXITY_KEY].to(x.logps.device)
        s = self.scales(complexity)
        bounds = SimpleNamespace(
            epsilon_low=s * self.cfg.epsilon_low, epsilon_high=s * self.cfg.epsilon_high, ratio_cap=None, dual_clip=None
        )
        loss, metrics = clipped_surrogate(torch.exp(x.logps - x.old_logps), as_2d(x.advantages), x.mask, bounds)
        metrics["adaptive_clip/complexity_mean"] = float(complexity.float().mean())
        metrics["adaptive_clip/epsilon_high_mean"] = float(bounds.epsilon_high.mean())
        spread = bounds.epsilon_high.std(unbiased=False) if bounds.epsilon_high.numel() > 1 else s.new_zeros(())
        metrics["adaptive_clip/epsilon_high_std"] = float(spread)  # 0: a uniform clip over the batch's rows
        return loss, metrics

    def describe(self) -> str:
        c = self.cfg
        source = c.complexity_column or f"distinct words of {c.profile_column} / {c.words_for_full}"
        return (
            f"-min(r*A, clip(r, 1 - s*{c.epsilon_low:g}, 1 + s*{c.epsilon_high:g})*A), r = pi/pi_old per token, "
            f"s = {c.min_scale:g} + {c.max_scale - c.min_scale:g} * c per completion, c = character complexity ({source})"
        )
