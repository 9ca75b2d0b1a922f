"""The combine base class and its registry: many reward columns -> one scalar per completion.

Most combiners return a **reward** (``produces = "rewards"``): the pipeline then adjusts, whitens and
shapes it and hands it to ``algorithm.advantage`` (rlpost/pipeline.py). A few (odrpo, rdpo,
decoupled) do their own group-relative estimate per threshold, part or whitened column and return an
**advantage** (``produces = "advantages"``): the pipeline sends it straight to the loss, and every
stage that reads or rewrites a reward either acts on the reward terms before the combine, or is
refused before any model loads (``check_advantage_combine``). Their ``score`` is the scalar reward
logged as ``reward`` and ``eval/reward``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch

from rlpost.advantages.base import grpo_advantages, nan_weighted_sum
from rlpost.core.activity import changed, share
from rlpost.core.component import Component
from rlpost.core.errors import ConfigError
from rlpost.core.registry import Registry

# the advantage estimators whose whole job (a per-group baseline over the std, or not) a combine that
# returns advantages has already done per threshold / part / column: it takes their place
GROUP_BASELINES = frozenset({"group_norm"})


class Combine(Component):
    """``reward_terms [N, R]`` and the term weights ``[R]`` -> rewards (or advantages) ``[N]`` and metrics.

    Combiners that need the group structure receive ``num_generations`` (G; rows g*G..g*G+G-1
    share a prompt). NaN marks a term that did not apply to a sample. Optional members: ``activity``,
    ``multi_column`` (below); ``check_run``, ``describe``, ``state_dict``, ...: ``Component``.
    """

    produces: ClassVar[Literal["rewards", "advantages"]] = "rewards"  # what __call__ returns (module docstring)
    # its mechanism acts between several reward columns (re-weighting, decorrelating, normalising each): `rlpost
    # show` warns when the run has a single column (config_warnings)
    multi_column: ClassVar[bool] = False

    def __call__(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Reward matrix [N, R], weights [R], G -> rewards [N] (advantages [N] when produces="advantages") and
        float metrics."""
        raise NotImplementedError

    def score(self, reward_terms: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The scalar reward [N] of a combine that produces advantages (logged as ``reward``, ``eval/reward``):
        by default the weighted sum of the terms, NaN terms left out (NaN where every term is)."""
        return nan_weighted_sum(reward_terms, weights)

    def activity(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int, output: torch.Tensor
    ) -> float | None:
        """``active/combine/<name>`` of one training batch (rlpost/core/activity.py): the share of rows whose GRPO
        advantage differs from the plain path's, GRPO's group-normalised advantage of the weighted sum
        (``grpo_advantages(nan_weighted_sum(terms, weights))``), up to one positive factor for the batch
        (``scale_free``). A combine that returns rewards is compared through GRPO's advantage of its ``output``
        (a reward rescaled or shifted per group changes nothing GRPO trains on); one that returns advantages,
        through ``output`` itself (NaN = 0, as the pipeline sends it). ``output`` is what ``__call__`` returned:
        a stateful combine (focal) is not called again. None: not reported (the weighted sum itself)."""
        g = num_generations
        noop = grpo_advantages(nan_weighted_sum(reward_terms, weights), g)
        mine = output.float().nan_to_num(0.0) if self.produces == "advantages" else grpo_advantages(output, g)
        return share(changed(mine, noop.to(mine.device), scale_free=True))

    def config_warnings(self, run: Any) -> list[str]:
        """A combine whose mechanism acts between columns (``multi_column``) on a run with one reward column."""
        if self.multi_column and len(run.reward.names) == 1:
            return [
                f"reward/combine={self.registry_name} acts between several reward columns, but this run has one "
                f"({run.reward.names[0]}): there is nothing to re-weight or decorrelate, and what is left is the "
                "weighted sum or close to it. Add reward terms, or split one into columns (a rubric's criteria: "
                "reward.terms.0.params.columns=criteria)."
            ]
        return []


def check_advantage_combine(run: Any) -> None:
    """ConfigError when a stage of ``run`` would treat its combine's advantages as rewards (build.check_run calls
    it when ``produces == "advantages"``).

    Allowed: a group-baseline ``algorithm.advantage`` (which the combine replaces), rollout strategies that
    generate or rewrite rewards relatively (applied to each reward term before the combine), and every
    stage that never reads a reward (losses, corrections, regularizers, gradient transforms, episodes).
    """
    name = type(run.reward.combine).registry_name
    algo, where = run.algorithm, f"reward/combine={name} returns group-centred advantages"
    advantage = type(algo.advantage).registry_name
    if advantage not in GROUP_BASELINES:
        raise ConfigError(
            f"{where}, which take the place of algorithm/advantage; algorithm/advantage={advantage} would estimate "
            "advantages again from rewards it no longer sees. Use algorithm/advantage=group_norm, group_center or "
            "rloo (their group baseline is what the combine already applies), or a combine that returns rewards "
            "(weighted_sum, focal)."
        )
    adjustment = type(algo.rollout).reward_adjustment
    if adjustment == "absolute":
        raise ConfigError(
            f"{where}, but algorithm/rollout={type(algo.rollout).registry_name} writes absolute reward values "
            "(on the scale of a binary reward) that mean nothing per reward term of this combine; use "
            "reward/combine=weighted_sum with it."
        )
    if algo.safety.cfg.whiten_rewards.enabled:
        raise ConfigError(
            f"{where}, already normalized per group; algorithm.safety.whiten_rewards would rescale them as if they "
            "were rewards. Set algorithm.safety.whiten_rewards.enabled=false."
        )
    if algo.overlong.soft_penalty:
        raise ConfigError(
            f"{where}; algorithm.overlong.soft_penalty adds a length penalty to a reward, after which it would be "
            "added to an advantage on another scale. Set algorithm.overlong.soft_penalty=false (or use "
            "algorithm.overlong.filter=true, which masks truncated completions instead)."
        )
    if algo.kl.coef > 0 and algo.kl.placement in ("reward", "token"):
        raise ConfigError(
            f"{where}; algorithm.kl.placement={algo.kl.placement} subtracts the KL from a reward. Use "
            "algorithm.kl.placement=loss with it."
        )


COMBINERS: Registry[Combine] = Registry("combine", Combine)
