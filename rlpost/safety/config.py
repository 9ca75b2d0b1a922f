"""``algorithm.safety``: the small-model stability kit (seed 000 #16) and the non-finite guard, all off by default.

Every field has a default here, so the algorithm bundles in conf/algorithm/*.yaml need no change; the
keys come into the composed config from ``conf/algorithm/safety/default.yaml`` (all off) or
``conf/algorithm/safety/kit.yaml`` (the seed's whole kit on). ``check_safety`` runs in ``build_run``
before any model loads and names the keys of an impossible combination.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range

if TYPE_CHECKING:
    from rlpost.run import BuiltRun


@dataclass(frozen=True)
class RatioGuardSettings:
    enabled: bool = False
    max_log_ratio: Annotated[float, Range(gt=0)] = 20.0  # c: log pi - log pi_old is clamped to [-c, c] before any exp

    def __post_init__(self):
        if self.max_log_ratio <= 0:
            raise ValueError(f"ratio_guard.max_log_ratio must be > 0, got {self.max_log_ratio}")


@dataclass(frozen=True)
class WhitenSettings:
    enabled: bool = False
    eps: Annotated[float, Range(gt=0)] = 1e-8  # added to the running std before dividing

    def __post_init__(self):
        if self.eps <= 0:
            raise ValueError(f"whiten_rewards.eps must be > 0, got {self.eps}")


@dataclass(frozen=True)
class RollbackSettings:
    # k: a step is bad when its mean reward < running mean - k * std
    reward_drop_std: Annotated[float | None, Range(ge=0)] = None
    reward_patience: Annotated[int, Range(ge=1)] = 3  # n: bad reward steps in a row that trigger a rollback
    reward_warmup: Annotated[int, Range(ge=0)] = 5  # good steps seen before the reward rule arms
    min_reward_std: Annotated[float, Range(ge=0)] = 0.0  # floor on the running std in the reward rule
    kl_max: Annotated[float | None, Range(gt=0)] = None  # a step is bad when its mean KL(pi || ref) (k3) is above this
    kl_patience: Annotated[int, Range(ge=1)] = 1  # bad KL steps in a row that trigger a rollback
    snapshot_every: Annotated[int, Range(ge=1)] = 1  # take a snapshot of the weights every N good steps
    optimizer: Literal["snapshot", "reset", "keep"] = "snapshot"  # optimizer state on rollback
    # stop training after this many rollbacks (0 = unlimited)
    max_rollbacks: Annotated[int, Range(ge=0, why="0 = unlimited")] = 0

    def __post_init__(self):
        if self.reward_drop_std is not None and self.reward_drop_std < 0:
            raise ValueError(f"rollback.reward_drop_std must be >= 0, got {self.reward_drop_std}")
        if self.kl_max is not None and self.kl_max <= 0:
            raise ValueError(f"rollback.kl_max must be > 0, got {self.kl_max}")
        for name in ("reward_patience", "kl_patience", "snapshot_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"rollback.{name} must be >= 1, got {getattr(self, name)}")
        if self.reward_warmup < 0 or self.max_rollbacks < 0 or self.min_reward_std < 0:
            raise ValueError("rollback.reward_warmup, max_rollbacks and min_reward_std must be >= 0")


@dataclass(frozen=True)
class NonFiniteSettings:
    enabled: bool = False
    # N: non-finite steps in a row that roll back to the last good weights (0 = never)
    rollback_after: Annotated[int, Range(ge=0, why="0 = never")] = 3

    def __post_init__(self):
        if self.rollback_after < 0:
            raise ValueError(f"nonfinite.rollback_after must be >= 0, got {self.rollback_after}")


@dataclass(frozen=True)
class LoraMergeSettings:
    # K: merge the adapter into the base weights and re-initialize it every K steps (0 = off)
    every: Annotated[int, Range(ge=0, why="0 = off")] = 0

    def __post_init__(self):
        if self.every < 0:
            raise ValueError(f"lora_merge.every must be >= 0, got {self.every}")


@dataclass(frozen=True)
class SafetySettings:
    """The stability kit; every mechanism is independent and off by default."""

    fp32_updates: bool = False  # fp32 master weights + fp32 LM head/log-probs when the model is 16-bit
    ratio_guard: RatioGuardSettings = field(default_factory=RatioGuardSettings)
    whiten_rewards: WhitenSettings = field(default_factory=WhitenSettings)
    rollback: RollbackSettings = field(default_factory=RollbackSettings)
    nonfinite: NonFiniteSettings = field(default_factory=NonFiniteSettings)
    lora_merge: LoraMergeSettings = field(default_factory=LoraMergeSettings)

    @property
    def rollback_rules(self) -> bool:
        """Whether any rule can roll back (so snapshots of good weights must be kept)."""
        rb = self.rollback
        nonfinite = self.nonfinite.enabled and self.nonfinite.rollback_after > 0
        return rb.reward_drop_std is not None or rb.kl_max is not None or nonfinite

    @property
    def any(self) -> bool:
        return (
            self.fp32_updates
            or self.ratio_guard.enabled
            or self.whiten_rewards.enabled
            or self.rollback_rules
            or self.nonfinite.enabled
            or self.lora_merge.every > 0
        )


def check_safety(run: BuiltRun) -> None:
    """Impossible combinations of ``algorithm.safety`` with the other groups (ConfigError names the keys)."""
    s = run.algorithm.safety.cfg
    if s.lora_merge.every > 0 and not run.model.lora.enabled:
        raise ConfigError(
            f"algorithm.safety.lora_merge.every={s.lora_merge.every} needs a LoRA adapter: set "
            "model.lora.enabled=true (or algorithm.safety.lora_merge.every=0)."
        )
    if s.fp32_updates and run.model.lora.enabled and "lm_head" in run.model.lora.target_modules:
        raise ConfigError(
            "algorithm.safety.fp32_updates=true runs the LM head in fp32, which TRL refuses when "
            "model.lora.target_modules includes lm_head; drop lm_head from the targets."
        )
    if s.fp32_updates and not run.sixteen_bit_weights and run.hardware.precision == "fp32":
        warnings.warn(
            "algorithm.safety.fp32_updates=true does nothing here: model.dtype=float32 and "
            "hardware.precision=fp32 already update and compute log-probs in fp32.",
            UserWarning,
            stacklevel=2,
        )
    if s.rollback.kl_max is not None and run.algorithm.kl.coef <= 0:
        raise ConfigError(
            f"algorithm.safety.rollback.kl_max={s.rollback.kl_max} watches KL(pi || ref), but "
            "algorithm.kl.coef=0 loads no reference model; set algorithm.kl.coef > 0 or rollback.kl_max=null."
        )
