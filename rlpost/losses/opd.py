"""``opd``: on-policy distillation (seed 000 #1, seed 000 #27), the loss of ``algorithm=opd``.

OPD needs no trainer of its own: the teacher's forward is this loss's ``score_rollouts`` member (the
trainer calls it on every component at scoring time) and the rest is this per-token loss.

Reading of the abstracts: the student samples its own completions (on-policy) and is trained
toward a teacher token by token; seed 000 #1 compares OPD with GRPO for translation, seed 000 #27
distils (several) specialist teachers into a generalist. The objective is the per-token reverse KL
``KL(pi_student || pi_teacher)`` on the student's samples, optimized as a policy gradient whose
per-token advantage is the negative sampled log-ratio::

    Delta_t = log pi_old(y_t) - log pi_teacher(y_t)          sampled reverse-KL estimate, detached [B, T]
    A_t     = -coef * Delta_t + reward_weight * A_i           per-token advantage [B, T]
    r_t     = exp(log pi(y_t) - log pi_old(y_t))
    l_t     = -min(r_t * A_t, clip(r_t, 1 - epsilon_low, 1 + epsilon_high) * A_t)

At r = 1 the gradient is ``coef * Delta_t * grad log pi(y_t)``, the per-token (discount-0)
reverse-KL gradient. Choices where the abstracts are silent: the sampled-token estimator rather than
the full-vocabulary KL (it needs only the log-probs TRL's fused head already computes, one no-grad
teacher forward per generation batch and no [B, T, V] logits); no discount over future tokens; the
PPO clip keeps ``num_iterations > 1`` safe; ``reward_weight`` (default 0: pure distillation) mixes
in the group advantage of the configured reward, so OPD composes with any ``reward=...``. The
teacher is any ``conf/model`` option (``teacher_model`` + ``teacher_overrides``), frozen, loaded
on first use next to the student, and must share the student's tokenizer. One teacher: several
(MOPD) would route prompts to teachers, which no seed abstract specifies.
Logged: ``opd/reverse_kl`` (masked mean Delta), ``opd/teacher_logp``, ``opd/student_logp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LOSSES, LossInputs, PolicyLoss
from rlpost.model_options import load_frozen, named_model_config
from rlpost.schema import Range

TEACHER_KEY = "rlpost_teacher_logps"


def reverse_kl_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    teacher_logps: torch.Tensor,
    advantages: torch.Tensor,
    coef: float,
    reward_weight: float,
    epsilon_low: float,
    epsilon_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logps, old_logps, teacher_logps [B, T], advantages [B, 1] or [B, T] -> (per-token loss [B, T], Delta [B, T])."""
    delta = (old_logps - teacher_logps).detach()
    adv = -coef * delta + reward_weight * advantages
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    return -torch.min(ratio * adv, clipped * adv), delta


@LOSSES.register("opd")
class OnPolicyDistillation(PolicyLoss):
    """On-policy distillation: per-token reverse KL(student || teacher) on the student's samples, as a policy gradient."""

    seed = "seed 000 #1, seed 000 #27"

    @dataclass(frozen=True)
    class Config:
        teacher_model: str = "smollm2-135m"  # a conf/model option
        teacher_overrides: dict[str, Any] | None = None  # ModelConfig fields changed on the teacher
        coef: Annotated[float, Range(ge=0)] = 1.0  # weight of the reverse-KL advantage
        # weight of the reward's group advantage (0 = pure distillation)
        reward_weight: Annotated[float, Range(ge=0)] = 0.0
        epsilon_low: Annotated[float, Range(ge=0, lt=1)] = 0.2  # PPO clip below 1
        epsilon_high: Annotated[float, Range(ge=0)] = 0.2  # PPO clip above 1

        def __post_init__(self):
            if self.coef < 0 or self.reward_weight < 0:
                raise ValueError(f"coef and reward_weight must be >= 0, got {self.coef}, {self.reward_weight}")
            if self.epsilon_low < 0 or self.epsilon_high < 0:
                raise ValueError(
                    f"epsilon_low and epsilon_high must be >= 0, got {self.epsilon_low}, {self.epsilon_high}"
                )

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.teacher_config = named_model_config(
            self.cfg.teacher_model,
            self.cfg.teacher_overrides,
            "algorithm.loss.teacher_model",
            "algorithm.loss.teacher_overrides",
        )
        self.teacher = None

    @torch.no_grad()
    def score_rollouts(self, trainer, output: dict) -> dict[str, torch.Tensor]:
        """The teacher's log-probs of this process's sampled completion tokens: {TEACHER_KEY: [B, T]}."""
        if self.teacher is None:
            self.teacher = load_frozen(self.teacher_config, trainer)
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            self.teacher,
            torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1),
            torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
            output["completion_ids"].size(1),
            batch_size=trainer.args.per_device_train_batch_size,
        )
        return {TEACHER_KEY: logps.float()}

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        teacher = x.batch.get(TEACHER_KEY)
        if teacher is None:
            raise ValueError(
                "loss 'opd' needs the teacher's log-probs in the batch (the trainer's score_rollouts hook)"
            )
        c = self.cfg
        loss, delta = reverse_kl_loss(
            x.logps, x.old_logps, teacher, x.advantages, c.coef, c.reward_weight, c.epsilon_low, c.epsilon_high
        )
        metrics = {
            "opd/reverse_kl": masked_metric_mean(delta, x.mask),
            "opd/teacher_logp": masked_metric_mean(teacher, x.mask),
            "opd/student_logp": masked_metric_mean(x.old_logps.detach(), x.mask),
        }
        return loss, metrics

    def describe(self) -> str:
        c = self.cfg
        adv = f"-{c.coef:g} * (log pi_old - log pi_teacher)" + (
            f" + {c.reward_weight:g} * A" if c.reward_weight else ""
        )
        return (
            f"-min(r*A_t, clip(r, {1 - c.epsilon_low:g}, {1 + c.epsilon_high:g})*A_t), A_t = {adv} per token "
            f"(on-policy distillation, teacher {c.teacher_model})"
        )
