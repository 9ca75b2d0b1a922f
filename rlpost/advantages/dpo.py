"""``dpo``: online iterative DPO inside the GRPO pipeline, and its exploration-driven form ED-iDPO (seed 004 #30).

EDO "extends reward-biasing style exploration objectives to iterative post-training" and builds it
into iterative DPO (ED-iDPO) as well as GRPO (ED-GRPO, ``advantages/ed.py``). Iterative DPO: each
round samples G completions per prompt from the current iterate, forms a preference pair from their
rewards, and takes DPO steps against a reference that is the previous iterate (the bundle moves the
reference to the policy every ``algorithm.kl.ref_sync_every`` steps). Per group g, with sequence
log-likelihoods ``S_i = sum_t m_it log pi(y_it)`` and ``S^ref_i`` under the reference::

    pair       w = best reward of the group, l = worst (none when they are equal)
    h_g        = beta * [(S_w - S^ref_w) - (S_l - S^ref_l)]                    implicit reward margin
    L_DPO      = (1 / P) sum_g -log sigmoid(h_g)                              P = number of groups
    L_explore  = (alpha / N) sum_i S_i / |y_i|   (token_mean; "sum": S_i)      N = P * G sampled completions
    L          = L_DPO + L_explore

``L_explore`` is the reward-biasing (optimistic) exploration term of exploratory preference
optimization: minimizing the likelihood of the responses the current iterate samples moves mass
toward responses it has not tried, which keeps the distribution flat (alpha = 0 is plain iDPO).

How it runs in the pipeline: at the rollout policy (theta = theta_old) the gradient of L is a policy
gradient with one weight per completion, so this component returns those weights as the
"advantages" ``[N]`` and the bundle's clip loss at ratio 1 with ``aggregation: seq-mean-token-sum``
(``sum_{b,t} l*m / B``, a mean over the step's sequences) back-propagates exactly ``grad L``::

    sigma_g = sigmoid(-h_g)                     (h_g from the rollout log-probs, detached)
    A_w    += G * beta * sigma_g,   A_l -= G * beta * sigma_g
    A_i    -= alpha / |y_i|         (token_mean; "sum": alpha)

(d/dtheta of -A_i S_i averaged over N = d L / d theta, since N = P * G). This keeps pairs exact however
the generation batch is split into micro-batches (TRL shuffles rows across them), where a loss that
needed both members of a pair in one micro-batch would not be. The price: the weights are frozen at
the rollout policy, so the run is refused when the policy moves within a generation batch
(``train.num_iterations > 1`` or ``train.minibatches > 1``), and with any loss other than ``clip``
or aggregation other than ``seq-mean-token-sum`` (their gradients at ratio 1 are not ``-A grad S``).

Choices where the abstract is silent:
- One pair per group: the first (in sampling order, so a uniformly random one among ties) of the
  highest and of the lowest reward; groups whose rewards are all equal give no pair (they still count
  in P, as a batch mean counts every prompt). NaN (unscorable) rewards take no part.
- The exploration term covers every sampled completion of the step, each as a token mean by default
  (``normalize: token_mean``), so long completions are not pushed down harder than short ones.
- ``beta = 0.1`` and ``alpha = 0.05`` are free constants (config fields); h_g reads the rollout
  log-probs (``extras["logps"]``) and the reference's (``extras["ref_logps"]``).
- ``S`` sums over the tokens the loss trains (``completion_mask`` is the loss mask): an episode's tool
  output is not in it, and a truncated completion under ``algorithm.overlong.filter`` has ``S = 0``
  (it can still be a pair member; only its partner then gets a gradient).
Logged: ``dpo/pair_frac``, ``dpo/explore_abs_mean``, and on steps with a pair ``dpo/loss`` (mean
-log sigmoid(h) over pairs), ``dpo/margin`` (mean h), ``dpo/accuracy`` (fraction with h > 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch
from rlpost.advantages.ed import surprisal
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range

AGGREGATION = "seq-mean-token-sum"  # the one aggregation under which the weights give grad L exactly


def preference_pairs(rewards: torch.Tensor, g: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """rewards [N] -> (chosen [P], rejected [P], has_pair [P] bool): row indices of each group's first best
    and first worst scorable completion; ``has_pair`` is False where they tie or fewer than 2 are scorable."""
    r = rewards.float().view(-1, g)
    valid = ~torch.isnan(r)
    offsets = torch.arange(r.size(0), device=r.device) * g
    best = torch.where(valid, r, torch.full_like(r, -torch.inf)).argmax(1)  # argmax/argmin: first index on ties
    worst = torch.where(valid, r, torch.full_like(r, torch.inf)).argmin(1)
    rows = torch.arange(r.size(0), device=r.device)
    has_pair = (valid.sum(1) >= 2) & (r[rows, best] > r[rows, worst])
    return offsets + best, offsets + worst, has_pair


@ADVANTAGES.register("dpo")
class IterativeDPO(Advantage):
    """Online (iterative) DPO on each group's best-vs-worst pair, plus ED-iDPO's exploration term, as policy-gradient weights."""

    seed = "seed 004 #30"
    requires = frozenset({"logps", "ref_logps"})

    @dataclass(frozen=True)
    class Config:
        beta: Annotated[float, Range(gt=0)] = 0.1  # DPO temperature: h = beta * (log-ratio margin)
        alpha: Annotated[float, Range(ge=0)] = 0.05  # weight of the exploration term (0 = plain iterative DPO)
        normalize: Literal["token_mean", "sum"] = "token_mean"  # exploration term per token, or per sequence

        def __post_init__(self) -> None:
            if self.beta <= 0 or self.alpha < 0:
                raise ValueError(f"beta must be > 0 and alpha >= 0, got beta={self.beta}, alpha={self.alpha}")

    def check_run(self, run: Any) -> None:
        algo, train = run.algorithm, run.settings.train
        loss = type(algo.loss).registry_name
        if loss != "clip" or algo.aggregation != AGGREGATION:
            raise ConfigError(
                f"algorithm.advantage=dpo gives DPO's gradient only through algorithm/loss=clip with "
                f"algorithm.aggregation={AGGREGATION} (got loss={loss}, aggregation={algo.aggregation}): "
                "use algorithm=ed_idpo, which sets both."
            )
        if train.num_iterations > 1 or train.minibatches > 1:
            raise ConfigError(
                f"algorithm.advantage=dpo weights each completion at the rollout policy, so the policy must not move "
                f"within a generation batch: train.num_iterations={train.num_iterations} and "
                f"train.minibatches={train.minibatches} must both be 1."
            )

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], extras["logps"], extras["ref_logps"] [N, T] -> weights [N], metrics."""
        missing = {"logps", "ref_logps"} - set(batch.extras)
        if missing:
            raise ValueError(f"advantage 'dpo' needs the rollout statistics {sorted(missing)}; the trainer fills them")
        cfg, g, mask = self.cfg, batch.num_generations, batch.completion_mask
        log_ratio = surprisal(batch.extras["ref_logps"], mask, "sum") - surprisal(batch.extras["logps"], mask, "sum")
        chosen, rejected, has_pair = preference_pairs(batch.rewards, g)
        h = cfg.beta * (log_ratio[chosen] - log_ratio[rejected])  # [P]
        weight = torch.where(has_pair, g * cfg.beta * torch.sigmoid(-h), torch.zeros_like(h))
        advantages = torch.zeros(batch.rewards.numel(), dtype=torch.float32, device=h.device)
        advantages.index_add_(0, chosen, weight)
        advantages.index_add_(0, rejected, -weight)
        lengths = mask.sum(1).to(h.device).float()
        per_token = cfg.normalize == "token_mean"
        explore = cfg.alpha / lengths.clamp(min=1.0) if per_token else torch.full_like(lengths, cfg.alpha)
        explore = torch.where(lengths > 0, explore, torch.zeros_like(explore))
        advantages = advantages - explore
        pairs = h[has_pair]
        metrics = {
            "dpo/pair_frac": float(has_pair.float().mean()),
            "dpo/explore_abs_mean": float(explore.mean()),
            "advantage/mean": float(advantages.mean()),
            "advantage/abs_mean": float(advantages.abs().mean()),
        }
        if pairs.numel():  # a step without pairs has no DPO loss to log (not a loss of 0)
            metrics["dpo/loss"] = float(-F.logsigmoid(pairs).mean())
            metrics["dpo/margin"] = float(pairs.mean())
            metrics["dpo/accuracy"] = float((pairs > 0).float().mean())
        return advantages, metrics

    def describe(self) -> str:
        c = self.cfg
        per = "/|y_i|" if c.normalize == "token_mean" else ""
        return (
            f"iterative DPO on each group's best-vs-worst pair, h = {c.beta:g}*((S_w - S_w^ref) - (S_l - S_l^ref)): "
            f"A_w = +G*{c.beta:g}*sigmoid(-h), A_l = -G*{c.beta:g}*sigmoid(-h); exploration A_i -= {c.alpha:g}{per} "
            f"(grad of mean_pairs -log sigmoid(h) + {c.alpha:g} mean_i S_i{per}, at the rollout policy)"
        )
