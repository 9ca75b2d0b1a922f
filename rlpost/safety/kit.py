"""SafetyKit: the stability kit (seed 000 #16) and the non-finite guard wired into RLPostTrainer.

Built from ``algorithm.safety`` by ``build_run`` (``BuiltRun.algorithm.safety``) and attached by
``RLPostTrainer.__init__``, so every subclass (PPO included) inherits it through four calls:

    stage 3   rewards = kit.on_rewards(task_rewards, metrics, train)   whitening; the step's raw reward
    stage 5   x = kit.on_loss_inputs(x, mode)                          ratio guard; KL for the rollback rule
    compute_loss -> kit.on_loss(loss, mode)                           non-finite flag (the final loss)
    create_optimizer -> kit.on_optimizer(optimizer)                    fp32 master weights
and its own ``SafetyCallback``: ``on_pre_optimizer_step`` (after clipping, model still at W_t) runs
the non-finite check, the rollback rules, snapshots and restores; ``on_step_end`` the LoRA merge.

Events (rollback, skipped step, merge, ...) go to ``kit.events``, the ``rlpost.safety`` logger and
the trainer's ``event_sink`` (the run directory's ``events.jsonl``); metrics through the ``log`` callable
``attach`` receives (the trainer's ``record_metric``). The kit is a stateful component:
whitening statistics, rule counters and fp32 masters travel with every checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

from rlpost.core.component import Component
from rlpost.losses.kl import kl_estimate
from rlpost.safety.config import SafetySettings, check_safety
from rlpost.safety.fp32_updates import MasterWeights
from rlpost.safety.lora_merge import lora_base_weights, merge_and_reinit
from rlpost.safety.nonfinite import NonFiniteGuard, drop_grads, grads_finite
from rlpost.safety.ratio_guard import guard_log_ratio
from rlpost.safety.rollback import RollbackRules, Snapshot
from rlpost.safety.whiten import RewardWhitener

log = logging.getLogger("rlpost.safety")


class SafetyKit(Component):
    """See the module docstring; a no-op when every mechanism is off."""

    Config = SafetySettings  # type: ignore[assignment]  # the nested Config is a shared settings dataclass, not a subclass
    stateful = True  # whitening statistics, rule counters and fp32 masters travel with every checkpoint

    def __init__(self, cfg: SafetySettings):
        super().__init__(cfg)
        self.whitener = RewardWhitener(self.cfg.whiten_rewards.eps) if self.cfg.whiten_rewards.enabled else None
        self.rules = RollbackRules(self.cfg.rollback)
        self.nonfinite = NonFiniteGuard(self.cfg.nonfinite.rollback_after if self.cfg.nonfinite.enabled else 0)
        self.masters: MasterWeights | None = None
        self.snapshot = Snapshot()
        self.rollbacks = self.merges = self.good_steps = 0
        self.events: list[dict[str, Any]] = []
        self.trainer: Any = None  # the RLPostTrainer, set by attach()
        self.event_sink: Callable[[dict], None] | None = None
        self.log: Callable[[str, str, float], None] | None = None  # (mode, name, value): the trainer's metrics
        self._reward: float | None = None  # mean raw reward of the newest rollouts, consumed by the rules
        self._kl: list[float] = []  # per micro-batch KL of this step
        self.stop = False

    def check_run(self, run) -> None:  # called by build.check_run for every component
        check_safety(run)

    def describe(self) -> str:
        return "; ".join(self.describe_lines()) or "every mechanism off"

    def describe_lines(self) -> list[str]:
        """One line per mechanism that is on (``rlpost show``)."""
        c, rb, lines = self.cfg, self.cfg.rollback, []
        if c.fp32_updates:
            lines.append("fp32 master weights for the optimizer and an fp32 LM head (16-bit model)")
        if c.ratio_guard.enabled:
            lines.append(
                f"ratio r = exp(clamp(logp - old_logp, -c, c)), c = {c.ratio_guard.max_log_ratio:g}, in every loss"
            )
        if c.whiten_rewards.enabled:
            lines.append("task reward -> (r - running mean) / (running std + eps) before shaping")
        if rb.reward_drop_std is not None:
            lines.append(
                f"roll back after {rb.reward_patience} steps with mean reward < running mean - "
                f"{rb.reward_drop_std:g} std (armed after {rb.reward_warmup} good steps)"
            )
        if rb.kl_max is not None:
            lines.append(f"roll back after {rb.kl_patience} steps with KL(pi || ref) > {rb.kl_max:g}")
        if c.nonfinite.enabled:
            after = c.nonfinite.rollback_after
            lines.append(
                "skip steps with a NaN/inf loss or gradient" + (f"; roll back after {after} in a row" if after else "")
            )
        if c.lora_merge.every:
            lines.append(f"merge LoRA into the base and re-initialize it every {c.lora_merge.every} steps")
        return lines

    # ---- wiring -------------------------------------------------------------------------------
    def attach(
        self,
        trainer,
        event_sink: Callable[[dict], None] | None = None,
        log: Callable[[str, str, float], None] | None = None,
    ) -> SafetyKit:
        """Wire the kit into ``trainer`` (its model, optimizer, state and callbacks); ``log(mode, name, value)``
        writes a metric (the trainer's ``record_metric``)."""
        self.trainer, self.event_sink, self.log = trainer, event_sink, log
        self.snapshot, self._reward, self._kl, self.stop = Snapshot(), None, [], False  # per training run
        if self.cfg.any:
            trainer.add_callback(SafetyCallback(self))
        return self

    def on_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        if self.cfg.fp32_updates:
            self.masters = MasterWeights()
            self.masters.adopt(optimizer)
        return optimizer

    # ---- stages 3 and 5 -------------------------------------------------------------------------
    def on_rewards(self, rewards: torch.Tensor, metrics: dict[str, float], train: bool) -> torch.Tensor:
        """Task rewards [N] (gathered) -> whitened [N] when enabled; remembers the step's raw mean."""
        if train:
            self._reward = torch.nanmean(rewards.float()).item()
        if self.whitener is None:
            return rewards
        whitened, stats = self.whitener(rewards, update=train)
        metrics.update(stats)
        return whitened

    def on_loss_inputs(self, x, mode: str):
        """LossInputs -> LossInputs with the guarded ratio; records the micro-batch's KL for the rule."""
        if mode == "train" and self.cfg.rollback.kl_max is not None and x.ref_logps is not None:
            self._kl.append(x.masked_mean(kl_estimate(x.logps.detach(), x.ref_logps, "k3")))
        if not self.cfg.ratio_guard.enabled:
            return x
        x, stats = guard_log_ratio(x, self.cfg.ratio_guard.max_log_ratio)
        self._log(stats, mode)
        return x

    def on_loss(self, loss: torch.Tensor, mode: str) -> None:
        """The micro-batch loss that is backpropagated (``compute_loss``): flags a non-finite one."""
        if mode == "train" and self.cfg.any:
            self.nonfinite.note_loss(loss)

    # ---- the optimizer step -------------------------------------------------------------------
    def before_optimizer_step(self) -> None:
        t = self.trainer
        model, optimizer = t.model, _inner(t.optimizer)
        trainable = [p for p in model.parameters() if p.requires_grad]
        loss_bad = self.nonfinite.loss_nonfinite
        local_bad = loss_bad or not grads_finite(trainable)
        finite = not bool(t.accelerator.gather(torch.tensor([float(local_bad)], device=t.accelerator.device)).max())
        reward, self._reward = self._reward, None
        kl = sum(self._kl) / len(self._kl) if self._kl else None
        self._kl = []
        bad, reason = self.rules.judge(reward, kl) if finite else (True, None)
        self.nonfinite.loss_nonfinite = False
        metrics: dict[str, float] = {}
        skip = False
        if self.cfg.nonfinite.enabled:
            skip = not finite
            metrics["safety/nonfinite_skipped"] = float(skip)
            if skip:
                self._event("nonfinite_skip", nonfinite_loss=loss_bad, streak=self.nonfinite.streak + 1)
            if self.nonfinite.end_step(finite):
                reason = f"{self.cfg.nonfinite.rollback_after} non-finite steps in a row"
            metrics["safety/nonfinite_total"] = float(self.nonfinite.total)
        if reason is not None:
            skip = True
            self._rollback(model, optimizer, reason)
        elif finite and not bad and self.cfg.rollback_rules:
            self.good_steps += 1
            if (self.good_steps - 1) % self.cfg.rollback.snapshot_every == 0:
                with_opt = self.cfg.rollback.optimizer == "snapshot"
                self.snapshot.take(self._snapshot_params(model), self.masters, optimizer, t.state.global_step, with_opt)
        if skip:
            drop_grads(model.parameters())
        if self.cfg.rollback_rules:
            metrics["safety/rollbacks"] = float(self.rollbacks)
            metrics["safety/reward_streak"] = float(self.rules.reward_streak)
        self._log(metrics, "train")

    def _rollback(self, model, optimizer, reason: str) -> None:
        if self.snapshot.step is None:
            self._event("rollback_unavailable", reason=reason)
            self.rules.reset_streaks()
            return
        self.snapshot.restore(self._snapshot_params(model), self.masters, optimizer, self.cfg.rollback.optimizer)
        self.rollbacks += 1
        self.rules.reset_streaks()
        self._event("rollback", reason=reason, restored_to_update=self.snapshot.step, rollbacks=self.rollbacks)
        limit = self.cfg.rollback.max_rollbacks
        if limit and self.rollbacks >= limit:
            self.stop = True
            self._event("stop", reason=f"rollback limit {limit} reached")

    def after_step(self) -> None:
        every, t = self.cfg.lora_merge.every, self.trainer
        if every and t.state.global_step % every == 0:
            layers = merge_and_reinit(t.model, _inner(t.optimizer), self.masters)
            self.merges += 1
            self._event("lora_merge", step=t.state.global_step, layers=layers)  # after the update
        if every:
            self._log({"safety/lora_merges": float(self.merges)}, "train")

    def _snapshot_params(self, model) -> list[tuple[str, torch.nn.Parameter]]:
        base = {id(p) for _, p in lora_base_weights(model)} if self.cfg.lora_merge.every else set()
        return [(n, p) for n, p in model.named_parameters() if p.requires_grad or id(p) in base]

    # ---- logging ------------------------------------------------------------------------------
    def _log(self, metrics: dict[str, float], mode: str) -> None:
        for key, value in metrics.items():
            if self.log is None:
                raise RuntimeError("SafetyKit: attach(trainer, log=...) before training")
            self.log(mode, key, value)

    def _event(self, kind: str, step: int | None = None, **details: Any) -> None:
        """``step``: the step number metrics.jsonl gives this update (default: the update in progress)."""
        row = {"step": self.trainer.state.global_step + 1 if step is None else step, "event": kind, **details}
        self.events.append(row)
        log.warning("safety event: %s", row)
        if self.event_sink is not None and self.trainer.accelerator.is_main_process:
            self.event_sink(row)

    # ---- checkpoint state (rlpost/runs/state.py) ---------------------------------------------------
    def state_dict(self) -> dict:
        state = {
            "rules": self.rules.state_dict(),
            "nonfinite": self.nonfinite.state_dict(),
            "counters": {"rollbacks": self.rollbacks, "merges": self.merges, "good_steps": self.good_steps},
        }
        if self.whitener is not None:
            state["whitener"] = self.whitener.state_dict()
        if self.masters is not None:
            state["masters"] = self.masters.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.rules.load_state_dict(state["rules"])
        self.nonfinite.load_state_dict(state["nonfinite"])
        counters = state["counters"]
        self.rollbacks, self.merges, self.good_steps = counters["rollbacks"], counters["merges"], counters["good_steps"]
        if self.whitener is not None and "whitener" in state:
            self.whitener.load_state_dict(state["whitener"])
        if self.masters is not None and "masters" in state:
            self.masters.load_state_dict(state["masters"])


class SafetyCallback(TrainerCallback):
    """Runs the kit at the optimizer step (see SafetyKit)."""

    def __init__(self, kit: SafetyKit):
        self.kit = kit

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.kit.before_optimizer_step()
        if self.kit.stop:
            control.should_training_stop = True
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self.kit.after_step()
        if self.kit.stop:
            control.should_training_stop = True
        return control


def _inner(optimizer):
    """The torch optimizer inside accelerate's AcceleratedOptimizer (or the optimizer itself)."""
    return getattr(optimizer, "optimizer", optimizer)
