"""``turn_grpo``: per-turn advantages for environment episodes (``data/env``): reward-to-go over the group baseline.

The default advantage of an episode is trajectory-level GRPO: every trained token carries the episode's
group-normalized reward. With per-turn rewards (``StepResult.reward``, e.g. -0.1 for each wrong guess)
a turn should answer only for what follows it. For episode i of a group, with combined reward r_i
(``reward.combine=weighted_sum``, the env term's weight w) and per-turn rewards e_{i,1..T_i}::

    R_{i,t} = r_i - w * sum_{t' < t} e_{i,t'}             reward-to-go from turn t (R_{i,1} = r_i)
    A_{i,t} = (R_{i,t} - mean_j r_j) / (std_j r_j + eps)  the group's trajectory baseline and scale

and every token of turn t gets A_{i,t} (observation tokens get 0; they are not trained). With rewards
that arrive only at the end, R_{i,t} = r_i for every t and this is exactly ``group_norm``.

Choices where the issue is silent: the baseline is the group's trajectory-level one (not a per-turn
mean over the episodes that reached turn t, which is undefined when fewer than two did); the std is
unbiased (Bessel), eps 1e-4 added to it, as group_norm; an unscorable episode (NaN reward) gets 0; a
turn cut by the length cap has no reward of its own, and its reward-to-go is what remains after the
turns before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch
from rlpost.advantages.group_norm import nanstd
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


@ADVANTAGES.register("turn_grpo")
class TurnGRPO(Advantage):
    """Per-turn advantages of episodes: each turn's reward-to-go over the group's trajectory baseline."""

    @dataclass(frozen=True)
    class Config:
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to the group std before dividing

    env_weight: float = 1.0  # the env term's weight in reward.combine=weighted_sum (set by check_run)

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], rows' turn spans and turn rewards -> advantages [N, T] and metrics."""
        rewards, g = batch.rewards.float(), batch.num_generations
        grouped = rewards.view(-1, g)
        baseline = torch.nanmean(grouped, dim=1).repeat_interleave(g)  # [N]
        scale = nanstd(grouped, dim=1).repeat_interleave(g) + self.cfg.eps  # [N]
        advantages = torch.zeros_like(batch.completion_mask, dtype=torch.float32)  # [N, T]
        for i, row in enumerate(batch.rows):
            if torch.isnan(rewards[i]) or torch.isnan(scale[i]):
                continue
            earned = 0.0
            turn_rewards = row["rlpost_env_turn_rewards"]
            for t, (start, end) in enumerate(row["rlpost_env_spans"]):
                to_go = rewards[i] - self.env_weight * earned  # R_{i,t}
                advantages[i, start:end] = (to_go - baseline[i]) / scale[i]
                earned += turn_rewards[t] if t < len(turn_rewards) else 0.0
        trained = advantages[batch.completion_mask > 0]
        return advantages, {"advantage/mean": trained.mean().item() if trained.numel() else 0.0}

    def check_run(self, run: Any) -> None:
        if run.env is None:
            raise ConfigError("algorithm/advantage=turn_grpo assigns advantages to an episode's turns; set data/env.")
        if type(run.reward.combine).registry_name != "weighted_sum":
            raise ConfigError(
                "algorithm/advantage=turn_grpo subtracts the env term's earned turn rewards from the combined reward, "
                f"which needs reward.combine=weighted_sum (got {type(run.reward.combine).registry_name})."
            )
        weights = dict(zip(run.reward.names, run.reward.weights.tolist()))
        env_terms = [n for n, f in zip(run.reward.names, run.reward.funcs) if type(f).registry_name == "env"]
        self.env_weight = float(weights[env_terms[0]]) if env_terms else 1.0
