"""length: a penalty in [-1, 0] for missing a target length, 0 exactly on target.

The "length/verbosity" reward of METHODS.md section 3 (seed 000 #14: answers far longer than the
task needs). With ``L`` the completion length and ``T = target`` (both in ``unit``)::

    two_sided:  r = -min(1, |L - T| / T)          # too short and too long both cost
    over_only:  r = -min(1, max(0, L - T) / T)    # only verbosity costs

so the penalty grows linearly with the relative miss and saturates at -1 once the miss reaches
``T`` (``L = 0`` or ``L >= 2T`` in two_sided mode). Relative, not absolute, so one weight means the
same for a 10-token and a 1000-token target.

Units: ``tokens`` counts TRL's ``completion_ids`` (the sampled ids without padding, so the EOS
token counts when one was generated); ``words`` counts whitespace-separated words of the text;
``chars`` counts characters. ``tokens`` without ``completion_ids`` is an error rather than a quiet
switch to words, which would change what ``target`` means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.chat import completion_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, Reward


@REWARDS.register("length")
class Length(Reward):
    """Relative target-length penalty -min(1, |L - T| / T), in [-1, 0]."""

    @dataclass(frozen=True)
    class Config:
        target: Annotated[float, Range(gt=0)] = 32.0  # T: the length that costs nothing
        unit: Literal["tokens", "words", "chars"] = "tokens"  # what L counts
        mode: Literal["two_sided", "over_only"] = "two_sided"  # penalize short and long, or only long

        def __post_init__(self):
            if self.target <= 0:
                raise ValueError(f"target must be > 0, got {self.target}")

    def lengths(self, completions: list, completion_ids: list | None) -> list[int]:
        """``L`` per completion ``[N]`` in the configured unit."""
        if self.cfg.unit == "tokens":
            if completion_ids is None:
                raise ValueError("length reward with unit=tokens needs completion_ids (TRL passes them)")
            return [len(ids) for ids in completion_ids]
        texts = [completion_text(c) for c in completions]
        return [len(t.split()) if self.cfg.unit == "words" else len(t) for t in texts]

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` (+ ``completion_ids [N][T_i]``) -> penalties ``[N]`` in [-1, 0]."""
        target = self.cfg.target
        rewards = []
        for n in self.lengths(completions, kwargs.get("completion_ids")):
            miss = abs(n - target) if self.cfg.mode == "two_sided" else max(0.0, n - target)
            rewards.append(0.0 - min(1.0, miss / target))  # 0.0 - x: no -0.0 on target
        return rewards
