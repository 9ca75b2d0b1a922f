"""``gepo``: Group Entropy-Controlled Policy Optimization (seed 000 #30), GRPO with asymmetric,
entropy-conditioned advantage shaping.

For a batch of K prompt groups (G completions each), with per-token rollout entropies H_{i,t}
(``extras["entropies"]``, [N, T]) and the completion mask m_{i,t}::

    A_i   = GroupNorm(r)_i                                   base advantage (GRPO, group_norm.py)
    H_g   = sum_{i in g, t} m H / sum_{i in g, t} m          group entropy ("token": pooled token mean)
          = mean_{i in g} (sum_t m H / sum_t m)              ("sequence": mean of per-completion means)
    mu, s = running mean and std of past group entropies     (EMA of the first two moments, below)
    low   = mu - k_low * s,  high = mu + k_high * s
    A'_i  = pos_factor * A_i   if A_i > 0 and H_g < low      (confident group: damp exploitation)
          = neg_factor * A_i   if A_i < 0 and H_g > high     (exploring group: keep exploring)
          = A_i                otherwise

Running statistics (the state saved in checkpoints): one update per generation batch, from that
batch's valid group entropies h_1..h_K::

    S1 <- beta * S1 + (1 - beta) * mean_k h_k        S2 <- beta * S2 + (1 - beta) * mean_k h_k^2
    mu = S1,  s = sqrt(max(S2 - S1^2, 0))            (the first batch sets S1, S2 directly)

Choices where the abstract is silent:
- Group entropy is the mean token entropy over all valid tokens of the group (the issue's reading,
  "mean token entropy per group"); ``entropy_mean=sequence`` weights each completion equally
  instead. It is computed from the samples already drawn: no extra rollouts.
- Thresholds are mean -/+ k std of the *past* group entropies: the current batch is scored against
  the history, then joins it. An EMA of the raw moments (rather than a window of batches) gives the
  spread of the pooled history, i.e. both the spread within a batch and the drift across batches, with
  a state of three numbers; it is the plainest "running statistics" and has no quantile buffer.
- Attenuation is a constant factor (0.5 by default on both sides) under strict inequalities, so a
  group exactly on a threshold, and a history with zero spread around an equal group entropy (e.g.
  zero entropy everywhere), attenuate nothing. Factors of 1 (or infinite k) give GRPO exactly.
- Warm-up: with fewer than ``min_history`` past batches, ``warmup=current`` takes the thresholds
  from the current batch's own group entropies (the only estimate of the distribution there is);
  ``warmup=off`` leaves the advantages unchanged until the history is long enough.
- A group with no valid tokens has no entropy (NaN): it is never attenuated and not recorded.
- Metric ``gepo/attenuated_frac`` is over the nonzero advantages (0 when there are none); the
  thresholds are not logged on a step without any (``warmup=off``), rather than logged as NaN.
  ``advantage/*`` describe the final advantages; ``gepo/base_abs_mean`` the GRPO ones.
- The history is updated on every call; rlpost's held-out evaluation does not call advantages.
- On a task mixture (``data=mixture``, the abstract's setting) the thresholds are shared by every task: a
  task whose groups are more certain than the mixture's history has its positive advantages damped more
  often. ``split_column`` (the mixture's ``rlpost_source`` by default) breaks the metrics down by the
  rows' value there: ``gepo/<value>/group_entropy_mean``, ``attenuated_frac``, ``low_group_frac``,
  ``high_group_frac`` (nothing extra when the rows lack the column).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.core.schema import Range


def group_entropy(entropies: torch.Tensor, mask: torch.Tensor, g: int, mean: str = "token") -> torch.Tensor:
    """entropies [N, T], mask [N, T] -> [N / G] mean token entropy per group (NaN: no valid token)."""
    width = min(entropies.size(1), mask.size(1))
    h, m = entropies[:, :width].double(), mask[:, :width].double()
    if mean == "token":
        total = (h * m).view(-1, g, width).sum(dim=(1, 2))
        count = m.view(-1, g, width).sum(dim=(1, 2))
        return torch.where(count > 0, total / count.clamp(min=1.0), torch.full_like(total, math.nan))
    count = m.sum(1)
    per_seq = torch.where(count > 0, (h * m).sum(1) / count.clamp(min=1.0), torch.full_like(count, math.nan))
    return torch.nanmean(per_seq.view(-1, g), dim=1)  # NaN only where every completion of the group is empty


def shape(advantages: torch.Tensor, group_h: torch.Tensor, low: float, high: float, pos: float, neg: float, g: int):
    """advantages [N], group_h [N / G] -> (shaped advantages [N], attenuated mask [N] bool)."""
    h = group_h.repeat_interleave(g).to(advantages.device)
    damp_pos = (advantages > 0) & (h < low)  # comparisons with NaN are False: never attenuated
    damp_neg = (advantages < 0) & (h > high)
    shaped = torch.where(damp_pos, advantages * pos, torch.where(damp_neg, advantages * neg, advantages))
    return shaped, damp_pos | damp_neg


@ADVANTAGES.register("gepo")
class GEPO(Advantage):
    """GRPO advantages shaped by group entropy: damp A>0 in low-entropy groups, A<0 in high-entropy groups."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)

    seed = "seed 000 #30"
    requires = frozenset({"entropies"})

    @dataclass(frozen=True)
    class Config:
        scale: Literal["group", "batch", "none"] = "group"  # base advantage: group_norm's std scaling
        leave_one_out: bool = False  # base advantage: RLOO baseline (group_norm)
        eps: Annotated[float, Range(ge=0)] = 1e-4  # base advantage: added to the std (group_norm)
        entropy_mean: Literal["token", "sequence"] = "token"  # pool a group's tokens, or average per-completion means
        k_low: Annotated[float, Range(ge=0)] = 1.0  # low threshold = running mean - k_low * running std
        k_high: Annotated[float, Range(ge=0)] = 1.0  # high threshold = running mean + k_high * running std
        # multiplies positive advantages of groups below the low threshold
        pos_factor: Annotated[float, Range(ge=0, le=1)] = 0.5
        # multiplies negative advantages of groups above the high threshold
        neg_factor: Annotated[float, Range(ge=0, le=1)] = 0.5
        # EMA weight of the history per batch (0 = only the previous batch)
        momentum: Annotated[float, Range(ge=0, lt=1)] = 0.9
        min_history: Annotated[int, Range(ge=1)] = 1  # past batches needed before the history sets the thresholds
        warmup: Literal["current", "off"] = "current"  # before that: current batch's statistics, or no shaping
        # the rows' column whose values split the gepo/* metrics (rlpost_source: a data mixture's source); null: none
        split_column: str | None = "rlpost_source"

        def __post_init__(self) -> None:
            for name in ("pos_factor", "neg_factor"):
                if not 0.0 <= getattr(self, name) <= 1.0:
                    raise ValueError(f"{name} must be in [0, 1] (an attenuation), got {getattr(self, name)}")
            for name in ("k_low", "k_high"):
                if getattr(self, name) < 0:
                    raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
            if not 0.0 <= self.momentum < 1.0:
                raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
            if self.min_history < 1:
                raise ValueError(f"min_history must be >= 1, got {self.min_history}")
            if self.entropy_mean not in ("token", "sequence"):
                raise ValueError(f"Unknown entropy_mean {self.entropy_mean!r}. Valid choices: token, sequence.")
            if self.warmup not in ("current", "off"):
                raise ValueError(f"Unknown warmup {self.warmup!r}. Valid choices: current, off.")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.base = GroupNorm(
            GroupNorm.Config(scale=self.cfg.scale, leave_one_out=self.cfg.leave_one_out, eps=self.cfg.eps)
        )
        self.count = 0  # batches in the history
        self.mean = 0.0  # S1: EMA of the batch mean of group entropies
        self.sq_mean = 0.0  # S2: EMA of the batch mean of squared group entropies

    # ---- running statistics ----------------------------------------------------------------
    def history(self) -> tuple[float, float]:
        """(mu, s) of the past group entropies."""
        return self.mean, math.sqrt(max(self.sq_mean - self.mean**2, 0.0))

    def update(self, group_h: torch.Tensor) -> None:
        h = group_h[~torch.isnan(group_h)].double()
        if h.numel() == 0:
            return
        m1, m2 = float(h.mean()), float((h * h).mean())
        b = self.cfg.momentum if self.count else 0.0
        self.mean, self.sq_mean = b * self.mean + (1 - b) * m1, b * self.sq_mean + (1 - b) * m2
        self.count += 1

    def thresholds(self, group_h: torch.Tensor) -> tuple[float, float] | None:
        """(low, high) for this batch, or None (no shaping: warm-up off, or no entropy at all)."""
        if self.count >= self.cfg.min_history:
            mu, s = self.history()
        elif self.cfg.warmup == "current" and not torch.isnan(group_h).all():
            h = group_h[~torch.isnan(group_h)].double()
            mu, s = float(h.mean()), float(h.std(unbiased=False))
        else:
            return None
        return mu - self.cfg.k_low * s, mu + self.cfg.k_high * s

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count, "mean": self.mean, "sq_mean": self.sq_mean}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count, self.mean, self.sq_mean = int(state["count"]), float(state["mean"]), float(state["sq_mean"])

    # ---- the estimator ---------------------------------------------------------------------
    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], extras["entropies"] [N, T], completion_mask [N, T] -> advantages [N], metrics."""
        if "entropies" not in batch.extras:
            raise RuntimeError("gepo needs batch.extras['entropies'] (the trainer fills it: requires={'entropies'})")
        cfg, g = self.cfg, batch.num_generations
        base, metrics = self.base(batch)
        group_h = group_entropy(batch.extras["entropies"], batch.completion_mask, g, cfg.entropy_mean)
        limits = self.thresholds(group_h)
        if limits is None:
            advantages, attenuated = base, torch.zeros_like(base, dtype=torch.bool)
            low = high = math.nan
        else:
            low, high = limits
            advantages, attenuated = shape(base, group_h, low, high, cfg.pos_factor, cfg.neg_factor, g)
        self.update(group_h)

        valid = group_h[~torch.isnan(group_h)]
        nonzero, pos, neg = base != 0, base > 0, base < 0
        metrics.update(
            {
                "advantage/mean": float(advantages.mean()),
                "advantage/std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
                "advantage/abs_mean": float(advantages.abs().mean()),
                "gepo/base_abs_mean": float(base.abs().mean()),
                "gepo/group_entropy_mean": float(valid.mean()) if valid.numel() else 0.0,
                "gepo/group_entropy_std": float(valid.std(unbiased=False)) if valid.numel() else 0.0,
                "gepo/group_entropy_min": float(valid.min()) if valid.numel() else 0.0,
                "gepo/group_entropy_max": float(valid.max()) if valid.numel() else 0.0,
                "gepo/low_group_frac": float((group_h < low).float().mean()),
                "gepo/high_group_frac": float((group_h > high).float().mean()),
                "gepo/attenuated_frac": _frac(attenuated, nonzero),
                "gepo/attenuated_pos_frac": _frac(attenuated, pos),
                "gepo/attenuated_neg_frac": _frac(attenuated, neg),
                "gepo/history_batches": float(self.count),
            }
        )
        if limits is not None:  # no thresholds while warm-up is off: not logged rather than NaN
            metrics.update({"gepo/threshold_low": low, "gepo/threshold_high": high})
        metrics.update(self.split_metrics(batch, group_h, attenuated, nonzero, low, high))
        return advantages, metrics

    def split_metrics(
        self, batch: GroupBatch, group_h: torch.Tensor, attenuated: torch.Tensor, nonzero: torch.Tensor,
        low: float, high: float,
    ) -> dict[str, float]:  # fmt: skip
        """gepo/<value>/* per value of ``split_column`` over the groups [N / G] (a group's value: its first row's)."""
        column, g = self.cfg.split_column, batch.num_generations
        if column is None or not batch.rows or column not in batch.rows[0]:
            return {}
        values = [str(batch.rows[k * g].get(column)) for k in range(len(group_h))]
        out: dict[str, float] = {}
        for value in sorted(set(values)):
            groups = torch.tensor([v == value for v in values])
            rows = groups.repeat_interleave(g).to(attenuated.device)
            h = group_h[groups]
            valid = h[~torch.isnan(h)]
            out[f"gepo/{value}/group_entropy_mean"] = float(valid.mean()) if valid.numel() else 0.0
            out[f"gepo/{value}/low_group_frac"] = float((h < low).float().mean())
            out[f"gepo/{value}/high_group_frac"] = float((h > high).float().mean())
            out[f"gepo/{value}/attenuated_frac"] = _frac(attenuated & rows, nonzero & rows)
        return out

    def describe(self) -> str:
        c = self.cfg
        return (
            f"A = GRPO advantage ({self.base.describe()}); x{c.pos_factor:g} if A > 0 and H_group < mu - {c.k_low:g} s, "
            f"x{c.neg_factor:g} if A < 0 and H_group > mu + {c.k_high:g} s; H_group = mean token entropy of the group "
            f"({c.entropy_mean}), mu, s = EMA({c.momentum:g}) mean/std of past group entropies"
        )


def _frac(hit: torch.Tensor, among: torch.Tensor) -> float:
    n = int(among.sum())
    return float((hit & among).sum()) / n if n else 0.0
