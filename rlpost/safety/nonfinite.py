"""Non-finite guard (issue 7): a NaN/inf loss or gradient skips the optimizer step.

Per optimizer step: every micro-batch's loss is checked when it is computed (``note_loss``), and the
accumulated gradients (after clipping, just before ``optimizer.step()``) are checked in
``grads_finite``. If either is non-finite on any process, every gradient is dropped
(``p.grad = None``), so the optimizer leaves every parameter, and its moments, exactly as they were.
After ``rollback_after`` such steps in a row the kit restores the last good weights (``rollback.py``).

Choices: the LR scheduler still advances on a skipped step (the update is skipped, not the step);
the logged loss of a skipped step is TRL's (``logging_nan_inf_filter`` replaces a NaN loss by the
running average); a skipped step is never a "good" step, so it takes no snapshot.
Metrics: ``safety/nonfinite_skipped`` (1 on a skipped step, else 0), ``safety/nonfinite_total``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class NonFiniteGuard:
    """Streak of non-finite steps and the per-step loss flag."""

    def __init__(self, rollback_after: int):
        self.rollback_after = rollback_after
        self.streak = 0
        self.total = 0
        self.loss_nonfinite = False  # set by any micro-batch of the current step

    def note_loss(self, loss: torch.Tensor) -> None:
        if not bool(torch.isfinite(loss.detach()).all()):
            self.loss_nonfinite = True

    def end_step(self, finite: bool) -> bool:
        """Record the step's verdict; True when the streak reached ``rollback_after`` (then it resets)."""
        self.loss_nonfinite = False
        if finite:
            self.streak = 0
            return False
        self.streak += 1
        self.total += 1
        if self.rollback_after and self.streak >= self.rollback_after:
            self.streak = 0
            return True
        return False

    def state_dict(self) -> dict:
        return {"streak": self.streak, "total": self.total}

    def load_state_dict(self, state: dict) -> None:
        self.streak, self.total = int(state["streak"]), int(state["total"])


def grads_finite(params: Iterable[torch.nn.Parameter]) -> bool:
    """Whether every existing gradient is finite (one device sync)."""
    checks = [torch.isfinite(p.grad).all() for p in params if p.grad is not None]
    return bool(torch.stack(checks).all()) if checks else True


def drop_grads(params: Iterable[torch.nn.Parameter]) -> None:
    """Skip the coming optimizer step: parameters without a gradient are not touched by torch optimizers."""
    for p in params:
        p.grad = None
