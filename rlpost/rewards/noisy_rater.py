"""noisy_rater: a simulated stochastic 1-10 auto-rater on a verifiable quality ladder (the setting of seed 004 #25).

ODRPO is about "granular, multi-tier discrete rewards (e.g. 1-10 rubrics) that are inherently stochastic":
an LLM rater that gives the same response another score on each call, now and then an outlier. No local
model can be such a rater here (SmolLM2-135M's 1-10 replies are mostly malformed and do not tell a right
answer from a wrong one; docs/methods.md, ODRPO), so this term simulates one on top of a quality ladder
that can be checked. The true tier of an answer, with p its last number (after ``</think>``), g the gold
and e = |p - g| / max(1, |g|)::

    q = T (= 10)                  e <= tolerance (the right answer)
    q = T - 1 - b                 e in band b of ``bands`` (upper edges; default .01 .05 .1 .25 .5 1 2 -> 9..3)
    q = 2                         e above the last band
    q = 1                         no number at all

and each rating is a draw of the rater::

    s = clip(round(q + sd * z), 1, T)   z ~ N(0, 1)             (with probability 1 - outlier)
    s ~ uniform{1, ..., T}                                       (with probability ``outlier``: a rating gone wrong)
    reward = median of ``votes`` independent ratings             (votes = 1: one noisy evaluation)

``votes > 1`` is the abstract's expensive remedy (sample more ratings and take the majority; the median
of an odd count is a tier), the baseline ODRPO is meant to make unnecessary.

Choices where the abstract is silent (this term is a stand-in, not part of ODRPO):
- The quality ladder is relative error bands of an arithmetic answer (near misses above far-off ones,
  an answer above none): a verifiable, monotone 1-10 scale; a ``None`` gold is unscorable.
- The noise is Gaussian jitter rounded to a tier (sd 0.7: about half the ratings move one tier, 3% two)
  plus 5% uniform outliers; all three are config fields. Draws come from a ``torch.Generator`` seeded
  with ``seed`` whose state is saved with every checkpoint (a resumed run continues the same stream);
  every process draws from the same stream (their samples differ, their noise is correlated).
- The declared score range is [1, T], what ODRPO's levels are checked against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, Reward, column
from rlpost.rewards.math_answer import gold_number, last_number


@REWARDS.register("noisy_rater")
class NoisyRater(Reward):
    """A simulated stochastic 1-10 rater of arithmetic answers: a verifiable quality tier plus rater noise."""

    seed = "seed 004 #25"
    stateful = True  # the noise generator's state travels with every checkpoint (rlpost/runs/state.py)

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the gold answer
        bands: list[Annotated[float, Range(gt=0)]] = field(
            default_factory=lambda: [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0]
        )  # upper edges of the relative-error bands of tiers T-1, T-2, ... (T = len + 3)
        noise_sd: Annotated[float, Range(ge=0)] = 0.7  # sd of the rater's jitter, in tiers (rounded)
        outlier: Annotated[float, Range(ge=0, le=1)] = 0.05  # probability of a uniform 1..T rating
        votes: Annotated[int, Range(ge=1)] = 1  # independent ratings per sample; the reward is their median
        seed: Annotated[int, Range(ge=0)] = 0  # seed of the rater's noise
        strip_think: bool = True  # rate only the text after </think>
        tolerance: Annotated[float, Range(ge=0)] = 1e-9  # relative error that still counts as the right answer

        def __post_init__(self) -> None:
            if not self.bands or any(b <= a for a, b in zip(self.bands, self.bands[1:])):
                raise ValueError(f"bands must be a non-empty increasing list, got {self.bands}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.tiers = len(cfg.bands) + 3
        self.generator = torch.Generator().manual_seed(cfg.seed)

    def score_range(self) -> tuple[float, float]:
        return (1.0, float(self.tiers))

    def quality(self, text: str, gold: Any) -> int | None:
        """The true tier q of one answer (module docstring); None without a numeric gold."""
        g = gold_number(gold)
        if g is None:
            return None
        p = last_number(text)
        if p is None:
            return 1
        e = abs(p - g) / max(1.0, abs(g))
        if e <= self.cfg.tolerance:
            return self.tiers
        return next((self.tiers - 1 - b for b, edge in enumerate(self.cfg.bands) if e <= edge), 2)

    def rate(self, q: torch.Tensor) -> torch.Tensor:
        """True tiers q [M] -> one rating per tier [M] (jitter, outliers, clipping)."""
        c, gen = self.cfg, self.generator
        jitter = torch.round(q + c.noise_sd * torch.randn(q.shape, generator=gen)).clamp(1, self.tiers)
        uniform = torch.randint(1, self.tiers + 1, q.shape, generator=gen).float()
        return torch.where(torch.rand(q.shape, generator=gen) < c.outlier, uniform, jitter)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` and the gold column ``[N]`` -> ratings ``[N]`` in {1..T} (None: no numeric gold)."""
        golds = column(kwargs, self.cfg.column, len(completions), self.registry_name)
        tiers = [self.quality(answer_text(c, self.cfg.strip_think), g) for c, g in zip(completions, golds)]
        known = {i: float(t) for i, t in enumerate(tiers) if t is not None}
        out: list[float | None] = [None] * len(completions)
        if known:
            q = torch.tensor(list(known.values()))  # [M] true tiers of the scorable samples
            ratings = torch.stack([self.rate(q) for _ in range(self.cfg.votes)])  # [votes, M]
            for i, s in zip(known, ratings.median(dim=0).values.tolist()):  # the lower median for an even count
                out[i] = float(s)
        log = kwargs.get("log_metric")
        if callable(log) and known:
            log("noisy_rater/true_tier_mean", sum(known.values()) / len(known))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])

    def describe(self) -> str:
        c = self.cfg
        return (
            f"median of {c.votes} simulated ratings round(q + {c.noise_sd:g} z) (outliers {c.outlier:g}) of the "
            f"answer's tier q in 1..{self.tiers} (relative error bands {c.bands})"
        )
