"""The failure breaker: a run whose reward keeps failing stops instead of training on nothing.

``reward.on_failure`` decides what one failed sample becomes (rlpost/scoring/guard.py). A term that
fails on *every* sample, or on most of them step after step (a broken environment, a judge that is
down, a bug in a user's reward file), leaves no reward to learn from: the run used to go on with null
rewards and exit 0. The breaker watches each term's failures per training step (gathered over
processes) and stops the run (``RewardsBroken``, exit code 1) when

- the term failed on every sample of ``all_failed_steps`` consecutive steps (default 1: the first such
  step), or
- it failed on more than ``max_share`` of its samples for ``patience`` consecutive steps.

The message names the term, the step, the counts and the first failure with where it came from (the
user's file and line when the error came from their code: ``error_origin``). What can be saved is
saved before the process exits (the run's last completed step as a checkpoint, the summary; see
rlpost/train.py). Choices: only training steps count (a held-out batch never stops the run); a step
where the term was not called does not break a streak; ``all_failed_steps: null`` or ``patience:
null`` turns that rule off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from rlpost.core.errors import RunStopped
from rlpost.core.schema import Range


@dataclass(frozen=True)
class BreakerSettings:
    """``reward.breaker``: when repeated reward failures stop the run."""

    all_failed_steps: Annotated[int | None, Range(ge=1)] = (
        1  # stop after this many steps where a term failed on every sample
    )
    max_share: Annotated[float, Range(ge=0, le=1)] = 0.5  # ... or failed on more than this share of its samples
    patience: Annotated[int | None, Range(ge=1)] = 5  # ... for this many consecutive steps (null: no share rule)


class RewardsBroken(RunStopped):
    """A reward term failed on every sample, or on too many for too long: nothing is left to learn from."""


@dataclass
class _Streaks:
    all_failed: int = 0
    over_share: int = 0


class FailureBreaker:
    """Per-term failure streaks over training steps; ``update`` raises ``RewardsBroken`` when a rule trips."""

    def __init__(self, settings: BreakerSettings):
        self.settings = settings
        self.streaks: dict[str, _Streaks] = {}

    def update(self, step: int, term: str, failed: int, total: int, first: str | None) -> None:
        """One training step's count for ``term``: ``failed`` of ``total`` samples (gathered), ``first``
        failure's message (this process's; None when it saw none)."""
        if total <= 0:
            return
        s, streak = self.settings, self.streaks.setdefault(term, _Streaks())
        streak.all_failed = streak.all_failed + 1 if failed == total else 0
        streak.over_share = streak.over_share + 1 if failed > s.max_share * total else 0
        if s.all_failed_steps is not None and streak.all_failed >= s.all_failed_steps:
            rule = f"every sample failed for {streak.all_failed} step(s) (reward.breaker.all_failed_steps={s.all_failed_steps})"
        elif s.patience is not None and streak.over_share >= s.patience:
            rule = (
                f"more than {s.max_share:g} of its samples failed for {streak.over_share} steps "
                f"(reward.breaker.max_share={s.max_share:g}, patience={s.patience})"
            )
        else:
            return
        raise RewardsBroken(
            f"reward term {term!r} failed on {failed} of {total} samples at step {step}: {rule}. "
            f"First failure: {first or 'on another process'}. Nothing is left to learn from, so the run stopped; "
            "fix the reward or environment (reward.breaker and reward.on_failure set the tolerance)."
        )

    def state_dict(self) -> dict[str, dict[str, int]]:
        return {t: {"all_failed": s.all_failed, "over_share": s.over_share} for t, s in self.streaks.items()}

    def load_state_dict(self, state: dict[str, dict[str, int]]) -> None:
        self.streaks = {t: _Streaks(**s) for t, s in state.items()}
