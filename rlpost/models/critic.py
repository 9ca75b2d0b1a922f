"""PPO's critic: its config (``algorithm.critic``), the value head / critic model, the clipped value loss.

Two kinds (``algorithm.critic.kind``), seed 000 #29 and 000 #16 leave the critic's form open:

- ``head``: a linear value head ``V = w . h_t + b`` on the policy's last hidden state h_t (the
  backbone output TRL's fused LM head reads; captured by a forward hook, so the policy forward of the
  loss also yields the values at no extra cost). The value loss back-propagates into the shared
  backbone, as in TRL's old ``AutoModelForCausalLMWithValueHead``.
- ``model``: a separate critic, a float32 copy of the policy's initial backbone (before any LoRA
  adapter; fully trained) with its own value head and forward; the policy gets no value-loss gradient.

Either way the critic is a module owned by the trainer, not a submodule of the policy (the policy's
checkpoints and final folder stay plain transformers folders). Its parameters form their own
parameter group of TRL's optimizer (AdamW, ``critic.learning_rate``, no weight decay) and are clipped
to ``train.max_grad_norm`` separately from the policy (its norm is logged as ``critic/grad_norm``).
Its weights are written as ``critic.safetensors`` next to every checkpoint and the final model and
restored on resume (its AdamW moments travel in TRL's optimizer state).

The value head is zero-initialised (V = 0 at the start, so the first advantages are the plain
returns) and computes in float32 whatever the policy's dtype (seed 000 #16: fp32 in PPO updates).

Clipped value loss (PPO2 / TRL's old PPOTrainer), per token, with V_old the rollout-time values::

    V_clip = V_old + clamp(V - V_old, -value_clip, value_clip)
    l_t    = 0.5 * max((V - R)^2, (V_clip - R)^2)           value_clip = null: 0.5 * (V - R)^2

It is added to the per-token policy loss as ``value_coef * l_t`` before the run's one aggregation.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from torch import nn

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


@dataclass(frozen=True)
class CriticConfig:
    """``algorithm.critic``: present = PPO (a critic is built and the trainer is algorithms.ppo.PPOTrainer)."""

    kind: Literal["head", "model"] = "head"  # value head on the policy backbone, or a separate critic model
    # AdamW learning rate of the critic's parameters (null = train.learning_rate)
    learning_rate: Annotated[float | None, Range(gt=0)] = None
    value_coef: Annotated[float, Range(gt=0)] = 0.1  # weight of the value loss added to the policy loss
    # clip V - V_old to this range in the value loss (null = unclipped)
    value_clip: Annotated[float | None, Range(gt=0)] = 0.2

    def __post_init__(self) -> None:
        if self.kind not in ("head", "model"):
            raise ValueError(f"Unknown critic kind {self.kind!r}. Valid choices: head, model.")
        if self.value_coef <= 0:
            raise ValueError(f"value_coef={self.value_coef} must be > 0")
        if self.value_clip is not None and self.value_clip <= 0:
            raise ValueError(f"value_clip={self.value_clip} must be > 0 (or null for no clipping)")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0 (or null for train.learning_rate)")


class ValueHead(nn.Module):
    """h [B, L, H] (any dtype) -> V [B, L] in float32; zero-initialised."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1, dtype=torch.float32)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


class HiddenCapture:
    """The backbone's last hidden states [b, L, H] of the forwards run inside ``with capture() as hidden:``, one
    per forward call (a chunked log-prob pass runs several), for the value head.

    The hook is registered once, for the trainer's life, not per forward: the log-prob seam takes another
    path for a backbone with forward hooks (rlpost/trainer/logprobs.py ``_share_prefix``), and it must take
    the same one for the policy and the reference (a KL of exactly 0 at step 1)."""

    def __init__(self, backbone: nn.Module):
        self.hidden: list[torch.Tensor] | None = None  # collecting while not None
        backbone.register_forward_hook(self._hook)

    def _hook(self, module: nn.Module, args: object, output) -> None:
        if self.hidden is not None:
            self.hidden.append(output.last_hidden_state)

    @contextmanager
    def __call__(self) -> Iterator[list[torch.Tensor]]:
        self.hidden = []
        try:
            yield self.hidden
        finally:
            self.hidden = None


class CriticModel(nn.Module):
    """A separate critic: a copy of the policy's backbone plus a value head. ids, mask [B, L] -> V [B, L]."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.backbone = copy.deepcopy(policy.base_model).float()  # the decoder without the LM head, in fp32
        self.head = ValueHead(policy.config.get_text_config().hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return self.head(hidden)


def completion_values(values: torch.Tensor, completion_length: int) -> torch.Tensor:
    """V over the whole sequence [B, L] -> V(s_t) for completion token t [B, T]: the state before token t
    is the position that predicts it, exactly TRL's log-prob alignment (``hidden[:, :-1]``, last T)."""
    return values[:, :-1][:, -completion_length:]


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip: float | None
) -> tuple[torch.Tensor, dict[str, float]]:
    """V, V_old, R, mask [B, T] -> per-token value loss [B, T] (module docstring) and masked-mean metrics."""
    unclipped = (values - returns) ** 2
    if clip is None:
        loss, clipped_more = 0.5 * unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    else:
        v_clip = old_values + torch.clamp(values - old_values, -clip, clip)
        clipped = (v_clip - returns) ** 2
        loss, clipped_more = 0.5 * torch.max(unclipped, clipped), clipped > unclipped
    m = mask.to(values.dtype)
    count = m.sum().clamp(min=1.0)
    with torch.no_grad():
        metrics = {
            "value/loss": float((loss * m).sum() / count),
            "value/clipfrac": float((clipped_more.to(m.dtype) * m).sum() / count),
            "value/mean": float((values * m).sum() / count),
            "value/returns_mean": float((returns * m).sum() / count),
        }
    return loss, metrics


def check_critic(run) -> None:
    """Cross-key checks of a PPO run (ConfigError before any model loads)."""
    algo = run.algorithm
    critic, advantage = algo.critic, type(algo.advantage).registry_name
    if critic is not None and advantage != "gae":
        raise ConfigError(
            f"algorithm.critic is set but algorithm/advantage={advantage}: the critic's values are used only by "
            "algorithm/advantage=gae (use algorithm=ppo, or remove algorithm.critic)."
        )
    if algo.kl.placement == "token" and critic is None:
        raise ConfigError(
            "algorithm.kl.placement=token puts the KL in each token's reward, which needs token-level advantages "
            "(algorithm=ppo); with group advantages use placement=reward (sequence sum) or loss."
        )
    if critic is not None and (run.hardware.name.startswith("zero3") or run.hardware.zero_stage == 3):
        raise ConfigError(f"algorithm.critic is not supported with hardware={run.hardware.name} (ZeRO-3) yet.")


def describe_critic(cfg: CriticConfig, policy_lr: float) -> str:
    kind = "linear value head on the policy's last hidden state" if cfg.kind == "head" else "separate critic model"
    lr = cfg.learning_rate if cfg.learning_rate is not None else policy_lr
    clip = f"clamp(V - V_old, +-{cfg.value_clip:g})" if cfg.value_clip is not None else "no clipping"
    return f"{kind}, AdamW lr {lr:g}; + {cfg.value_coef:g} x 0.5*max((V-R)^2, (V_clip-R)^2) per token, V_clip = V_old + {clip}"
