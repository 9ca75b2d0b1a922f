"""Weight rollback when the reward collapses or the KL explodes (seed 000 #16, third safety layer).

The seed rolls back to earlier weights on "catastrophic policy collapse due to reward-model error";
the rule and its thresholds are ours, all config fields (``algorithm.safety.rollback``). Judged once
per optimizer step, just before ``optimizer.step()``, when the model still holds W_t (the weights
that generated step t's rollouts and computed its loss)::

    reward bad   R_t < mu - k * max(sigma, min_std)   (R_t: mean raw task reward of step t's rollouts;
                                                       mu, sigma: running mean/std of R over good steps;
                                                       armed after reward_warmup good steps)
    kl bad       KL_t > kl_max                         (KL_t: token-mean k3 KL(pi || ref) of step t)
    rollback     reward bad for reward_patience steps in a row, or kl bad for kl_patience in a row,
                 or (nonfinite.py) rollback_after non-finite steps in a row

A step with a finite loss, no bad rule and a good reward marks W_t as *good*: every
``snapshot_every`` good steps W_t is copied (CPU memory) before the update. A rollback copies the
snapshot back into the model (and the fp32 masters), skips the current update, resets the streaks,
and logs an event. Choices: the optimizer state follows ``optimizer``: ``snapshot`` (saved with the
weights and restored; the default, since AdamW moments of the collapsed trajectory would push straight
back), ``reset`` (emptied) or ``keep``; the LR schedule keeps its step; snapshots live in memory only
(a resumed run takes a new one at its first good step); with LoRA only the trainable tensors (and the
base weights when merge-and-reinit can change them) are copied. Bad steps do not enter mu/sigma.
"""

from __future__ import annotations

import copy

import torch

from rlpost.safety.config import RollbackSettings
from rlpost.safety.fp32_updates import MasterWeights
from rlpost.safety.whiten import RunningMoments


class RollbackRules:
    """Streak counters of the reward and KL rules; ``judge`` returns (bad, reason or None)."""

    def __init__(self, cfg: RollbackSettings):
        self.cfg = cfg
        self.reward = RunningMoments()  # per-step mean rewards of good steps
        self.reward_streak = 0
        self.kl_streak = 0

    def judge(self, reward: float | None, kl: float | None) -> tuple[bool, str | None]:
        """reward: this step's mean raw reward (None: no new rollouts); kl: its mean KL (None: not watched)."""
        cfg, bad, reason = self.cfg, False, None
        if cfg.reward_drop_std is not None and reward is not None:
            floor = self.reward.mean - cfg.reward_drop_std * max(self.reward.std, cfg.min_reward_std)
            if self.reward.count >= cfg.reward_warmup and reward < floor:
                bad = True
                self.reward_streak += 1
                if self.reward_streak >= cfg.reward_patience:
                    reason = f"reward {reward:.4g} < {floor:.4g} for {self.reward_streak} steps"
            else:
                self.reward_streak = 0
        if cfg.kl_max is not None and kl is not None:
            if kl > cfg.kl_max:
                bad = True
                self.kl_streak += 1
                if self.kl_streak >= cfg.kl_patience and reason is None:
                    reason = f"kl {kl:.4g} > {cfg.kl_max:g} for {self.kl_streak} steps"
            else:
                self.kl_streak = 0
        if not bad and reward is not None:
            self.reward.update(torch.tensor([reward]))
        return bad, reason

    def reset_streaks(self) -> None:
        self.reward_streak = self.kl_streak = 0

    def state_dict(self) -> dict:
        return {"reward": self.reward.state_dict(), "reward_streak": self.reward_streak, "kl_streak": self.kl_streak}

    def load_state_dict(self, state: dict) -> None:
        self.reward.load_state_dict(state["reward"])
        self.reward_streak, self.kl_streak = int(state["reward_streak"]), int(state["kl_streak"])


class Snapshot:
    """A CPU copy of the last good weights (and optionally the optimizer state)."""

    def __init__(self):
        self.step: int | None = None
        self.weights: dict[str, torch.Tensor] = {}
        self.optimizer: dict | None = None

    @torch.no_grad()
    def take(self, params, masters: MasterWeights | None, optimizer, step: int, with_optimizer: bool) -> None:
        """params: [(name, Parameter)]; the fp32 master is copied where there is one."""
        self.weights = {
            name: (masters.master_of(p) if masters else p).detach().to("cpu", copy=True) for name, p in params
        }
        self.optimizer = _cpu_copy(optimizer.state_dict()) if with_optimizer else None
        self.step = step

    @torch.no_grad()
    def restore(self, params, masters: MasterWeights | None, optimizer, optimizer_mode: str) -> None:
        for name, p in params:
            value = self.weights[name].to(p.device)
            if masters is not None:
                masters.write(p, value)
            else:
                p.copy_(value)
        if optimizer_mode == "snapshot" and self.optimizer is not None:
            optimizer.load_state_dict(copy.deepcopy(self.optimizer))
        elif optimizer_mode == "reset":
            optimizer.state.clear()


def _cpu_copy(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cpu_copy(v) for v in obj]
    return copy.deepcopy(obj)
