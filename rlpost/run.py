"""A built run: the composed config as plain Python objects, ready to train (``build.py`` makes it).

These types hold what ``build_run`` made (validated settings and constructed components) and
import no builder, trainer or component: the trainer, ``show`` and the tools read a ``BuiltRun``
without pulling in the code that built it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from rlpost.core.activity import key
from rlpost.core.config import BatchPlan, HardwareConfig, OverlongSettings, RunSettings, grpo_config_kwargs
from rlpost.data.sources import DataConfig
from rlpost.launch.deepspeed import deepspeed_config
from rlpost.models.loading import ModelConfig
from rlpost.runs.state import state_restored
from rlpost.scoring.breaker import BreakerSettings
from rlpost.scoring.correctness import Correctness

if TYPE_CHECKING:
    from rlpost.advantages.base import Advantage
    from rlpost.combine.base import Combine
    from rlpost.core.component import Component
    from rlpost.corrections.base import Correction
    from rlpost.grad.base import GradTransform
    from rlpost.losses.base import PolicyLoss
    from rlpost.losses.kl import KLConfig
    from rlpost.models.critic import CriticConfig
    from rlpost.models.lora_ensemble import EnsembleConfig
    from rlpost.regularizers.base import Regularizer
    from rlpost.rewards.base import Reward
    from rlpost.rollouts.base import RolloutStrategy
    from rlpost.scoring.guard import FailurePolicy
    from rlpost.select.base import Selector


# TRL's ``beta`` decides two things: whether it loads (and scores) a reference model, and the KL in *its* loss.
# rlpost's loss adds its own KL (rlpost/losses/kl.py, from algorithm.kl.coef) and never reads beta, so a run that
# needs reference log-probs without a KL passes this nonzero beta: the reference is loaded, no KL is trained.
REFERENCE_ONLY_BETA = 1e-12


@dataclass
class AlgorithmParts:
    """``algorithm``: the built components of the update and the settings that tie them together."""

    name: str  # the bundle (conf/algorithm/<name>.yaml)
    advantage: Advantage
    loss: PolicyLoss
    regularizers: list[tuple[str, Regularizer]]
    aggregation: str
    kl: KLConfig
    dynamic_sampling: bool
    overlong: OverlongSettings
    correction: Correction  # off-policy / mismatch correction (the registered `none` when unset)
    rollout: RolloutStrategy  # how a group is produced (`none`: TRL's sampling)
    select: Selector  # which sampled trajectories the update uses (`none`: all)
    safety: Any  # the stability kit, a rlpost.safety.kit.SafetyKit (all off by default; imports this module)
    # gradient transforms before clipping, (name, transform) in the order they apply ([] = plain gradients)
    grad: list[tuple[str, GradTransform]] = field(default_factory=list)
    trainer: str = "grpo"  # the bundle's trainer class, a key of rlpost.algorithms.TRAINERS
    critic: CriticConfig | None = None  # PPO's critic (None = no critic: group advantages)
    ensemble: EnsembleConfig | None = None  # UG-TTT's LoRA ensemble (None = one policy)
    offline: Any = None  # algorithm.replay set: a RegenSpec (rlpost/algorithms/regen.py); None = online rollouts
    max_refill_rounds: int = 0  # DAPO's refill: extra generation rounds for dropped groups (rlpost/trainer/refill.py)


@dataclass
class RewardParts:
    """``reward``: one TRL reward function per term, their weights, and how the columns are combined."""

    funcs: list[Reward]  # TRL reward functions, one per term
    names: list[str]  # [R]
    weights: torch.Tensor  # [R]
    combine: Combine
    failure: list[FailurePolicy] = field(default_factory=list)  # [R] what a failed sample becomes (reward_guard.py)
    breaker: BreakerSettings = field(default_factory=BreakerSettings)  # when failures stop the run (breaker.py)

    def combined(self, terms: torch.Tensor, num_generations: int = 1) -> tuple[torch.Tensor, dict[str, float]]:
        """Reward terms [N, R] -> rewards [N] and the combiner's metrics: the one combination that training
        (rlpost/pipeline.py, step 3.1) and held-out evaluation (rlpost/evaluation/evaluate.py) both use."""
        return self.combine(terms, self.weights.to(terms.device), num_generations)

    def scored(self, terms: torch.Tensor, num_generations: int = 1) -> tuple[torch.Tensor, dict[str, float]]:
        """Reward terms [N, R] -> the scalar reward [N] (and metrics) that is logged and evaluated: the combined
        reward, or the combine's ``score`` when it returns advantages (rlpost/combine/base.py)."""
        if self.combine.produces == "advantages":
            return self.combine.score(terms, self.weights.to(terms.device)), {}
        return self.combined(terms, num_generations)

    @contextmanager
    def held_out(self) -> Iterator[None]:
        """Scoring held-out rows inside the block leaves a stateful combine as it was (focal's saturation
        is estimated from training batches only): its state is restored on exit."""
        with state_restored(self.combine):
            yield


@dataclass
class BuiltRun:
    """Everything one training job needs except the model weights and the data rows."""

    settings: RunSettings
    model: ModelConfig
    data: DataConfig
    reward: RewardParts
    algorithm: AlgorithmParts
    hardware: HardwareConfig
    plan: BatchPlan
    data_transform: Any = None  # data.transform: a built rlpost.transforms.base.Transform, (rows, split) -> rows
    env: Any = None  # data/env: an rlpost.envs.base.Environment (one per episode is made from it); None: no episodes
    correct: Correctness | None = None  # eval/accuracy's criterion (rlpost/scoring/correctness.py); None: no accuracy
    eval_sets: list[Any] = field(default_factory=list)  # eval.sets: rlpost.evaluation.sets.EvalSet, in order
    # data=mixture: an rlpost.data.mixture.Mixture (its sources; data is then the first source's, env the sources'
    # rlpost.envs.sources.SourceEnvironment, reward every source's terms on its own rows); None: one data source
    mixture: Any = None

    def named_components(self) -> list[tuple[str, Component]]:
        """Every built component with its config path (state saving, ``requires``, ``check_run``, ``sampler``)."""
        algo = self.algorithm
        named: list[tuple[str, Component]] = [("data.mixture", self.mixture)] if self.mixture is not None else []
        named += [("algorithm.advantage", algo.advantage), ("algorithm.loss", algo.loss)]
        named += [(f"algorithm.regularizers.{name}", reg) for name, reg in algo.regularizers]
        named += [(f"algorithm.grad.{name}", transform) for name, transform in algo.grad]
        named.append(("algorithm.correction", algo.correction))
        named.append(("algorithm.rollout", algo.rollout))
        named.append(("algorithm.select", algo.select))
        if algo.safety.cfg.any:
            named.append(("algorithm.safety", algo.safety))
        named.append(("reward.combine", self.reward.combine))
        named += [(f"reward.terms.{name}", func) for name, func in zip(self.reward.names, self.reward.funcs)]
        if self.env is not None:
            named.append(("data.env", self.env))
        return named

    def figure_components(self) -> list[tuple[str, Component]]:
        """``(active/<kind>/<name>, component)`` for every component that may log an activity figure (issue 48,
        rlpost/core/activity.py): the names the trainer and the pipeline log them under."""
        algo = self.algorithm
        pairs: list[tuple[str, Component]] = [
            (key("combine", self.reward.combine.registry_name), self.reward.combine),
            (key("rollout", algo.rollout.registry_name), algo.rollout),
            (key("advantage", algo.advantage.registry_name), algo.advantage),
            (key("select", algo.select.registry_name), algo.select),
            (key("correction", algo.correction.registry_name), algo.correction),
            (key("loss", algo.loss.registry_name), algo.loss),
        ]
        pairs += [(key("regularizer", name), reg) for name, reg in algo.regularizers]
        pairs += [(key("grad", name), transform) for name, transform in algo.grad]
        return pairs

    def config_warnings(self) -> list[str]:
        """Settings visible from the config alone under which a method cannot act (its activity figure would stay
        0), one line each, for ``rlpost show``: every component's ``config_warnings`` and the pipeline's switches."""
        warnings = [line for component in self.components() for line in component.config_warnings(self)]
        algo, reward = self.algorithm, self.reward
        if algo.dynamic_sampling and not bool((reward.weights != 0).any()):
            warnings.append(
                "algorithm.dynamic_sampling: every reward weight is 0, so the reward has one level and every group is "
                "all-equal: dynamic sampling drops every group from the loss."
            )
        advantage, shaped = (
            algo.advantage,
            algo.overlong.soft_penalty or (algo.kl.coef > 0 and algo.kl.placement != "loss"),
        )
        if (
            algo.safety.cfg.whiten_rewards.enabled
            and advantage.registry_name == "group_norm"
            and advantage.cfg.scale == "group"
            and not shaped
        ):
            warnings.append(
                "algorithm.safety.whiten_rewards: whitening is one affine map of the rewards, which the group "
                "normalisation of algorithm/advantage=group_norm (scale=group) undoes within each group (up to its "
                "eps), and no reward shaping sits between them: it changes nothing (rlpost/safety/whiten.py)."
            )
        return warnings

    def grpo_config_kwargs(self, output_dir: str) -> dict[str, Any]:
        """Keyword arguments for ``trl.GRPOConfig`` of this run (train, benchmarks and tests share it)."""
        algo = self.algorithm
        kwargs = grpo_config_kwargs(
            self.settings.train,
            self.settings.logging,
            self.hardware,
            self.plan,
            seed=self.settings.seed,
            output_dir=output_dir,
            beta=algo.kl.coef if algo.kl.coef > 0 else REFERENCE_ONLY_BETA if self.needs_reference else 0.0,
            mask_truncated=algo.overlong.filter,
            run_name=self.settings.run_name,
        )
        if algo.correction.registry_name != "none":  # rlpost's correction replaces TRL's vLLM one, never both
            kwargs["vllm_importance_sampling_correction"] = False
        if self.hardware.zero_stage:  # DeepSpeed ZeRO: the generated config (rlpost/launch/deepspeed.py)
            kwargs["deepspeed"] = deepspeed_config(self.hardware)
        if self.fp32_lm_head:  # algorithm.safety.fp32_updates: log-probs and loss in fp32 (rlpost/safety/)
            kwargs["cast_lm_head_to_fp32"] = True
        if self.mixture is not None:  # its sampler resumes from the batches it counted, not transformers' data skip
            kwargs["ignore_data_skip"] = True
        if algo.kl.ref_sync_every:  # iterative post-training: the reference follows the policy (rlpost/losses/kl.py)
            kwargs.update(
                sync_ref_model=True,
                ref_model_sync_steps=algo.kl.ref_sync_every,
                ref_model_mixup_alpha=algo.kl.ref_sync_mix,
            )
        return kwargs

    @property
    def needs_reference(self) -> bool:
        """A reference model is loaded and scored: KL is on, or a component reads ``ref_logps`` (HARGO)."""
        return self.algorithm.kl.coef > 0 or any("ref_logps" in c.requires for c in self.components())

    @property
    def sixteen_bit_weights(self) -> bool:
        """The policy's weights are stored in a 16-bit dtype (so fp32 master weights differ from them)."""
        return self.model.dtype in ("bfloat16", "float16")

    @property
    def fp32_lm_head(self) -> bool:
        """TRL's ``cast_lm_head_to_fp32``: ``algorithm.safety.fp32_updates`` and something runs in 16 bits."""
        return self.algorithm.safety.cfg.fp32_updates and (
            self.sixteen_bit_weights or self.hardware.precision != "fp32"
        )

    def components(self) -> list[Component]:
        return [component for _, component in self.named_components()]
