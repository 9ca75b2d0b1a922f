"""``eval.every``: held-out evaluation during training, logged like any training metric.

Every ``every`` optimizer steps (after the step's optimizer update, ``on_step_end``) the policy is
evaluated on the held-out split with the run's settings and the ``eval/*`` numbers are logged at
that step: ``metrics.jsonl``, tensorboard and wandb all receive them. The final step is skipped when
``eval.at_end`` evaluates it anyway. The row is logged through ``transformers.Trainer.log`` and not
the trainer's own ``log``: TRL's ``GRPOTrainer.log`` would fold (and clear) the step's pending
training metrics into the eval row, so the training row that follows would lose them; and
``control.should_log``, which every ``on_log`` resets, is restored so that training row is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import Trainer, TrainerCallback


class PeriodicEvalCallback(TrainerCallback):
    def __init__(
        self,
        every: int,
        evaluate: Callable[[Any], dict[str, float]],
        skip_last: bool,
        on_result: Callable[[int, dict[str, float]], Any] | None = None,
    ):
        self.every = every
        self.evaluate = evaluate  # model -> {"eval/accuracy": ..., ...}
        self.skip_last = skip_last
        self.on_result = (
            on_result  # (step, metrics) after logging: checkpoints/best (rlpost/evaluation/best_checkpoint.py)
        )
        self.trainer: Trainer | None = None

    def attach(self, trainer: Trainer) -> PeriodicEvalCallback:
        self.trainer = trainer
        return self

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if self.every < 1 or step % self.every or (self.skip_last and step >= state.max_steps):
            return
        metrics = self.evaluate(model if model is not None else self.trainer.model)
        should_log = control.should_log  # on_log resets it; the step's own training row must still be logged
        Trainer.log(self.trainer, {k: float(v) for k, v in metrics.items()})
        control.should_log = should_log
        self.trainer.control = control
        if self.on_result is not None:
            self.on_result(step, metrics)
        return control
