"""``pmi_tokens``: P-GRPO, progressive PMI-inspired token-level modulation of GRPO (seed 000 #22).

The group advantage of a completion is redistributed over its tokens by each token's pointwise mutual
information with the outcome, and the modulation is ramped in over training::

    A_i        = GroupNorm(r)_i                                          GRPO advantage
    pmi_{i,t}  = log pi(y_t | x (+) h_i, y_<t) - log pi(y_t | x, y_<t)     estimator "model" (the default)
    s_{i,t}    = sign(A_i) * pmi_{i,t}
    u_{i,t}    = exp(lam_k * clip(s_{i,t}, -c, c)),   w_{i,t} = u_{i,t} / mean_t(u_{i,t})
    A_{i,t}    = A_i * w_{i,t}                                           [N, T]
    lam_k      = strength * min(1, k / ramp_steps)                       k = batches seen, this one included

x (+) h_i is the prompt with ``hint`` (filled with the row's ``answer_column``: "The correct answer is
7.") appended to its user turn, both log-probs under the rollout policy (the trainer's no-grad forwards:
the ``hinted_logps`` and ``logps`` rollout statistics). pmi_{i,t} is the PMI between token y_t and the
correct answer a in the policy's own context, log p(y_t | a, x, y_<t) / p(y_t | x, y_<t): a token the
answer makes likelier carries information about reaching it. In a success (A > 0) those tokens take
more of the credit; in a failure (A < 0) the tokens the answer makes *less* likely (pmi < 0: where the
completion turns away from the answer) take more of the blame. The mean of w over a completion's tokens
is 1, so each completion keeps its GRPO advantage in total (sum_t A_{i,t} = T_i A_i); only the credit per
token changes. ``strength: 0`` is GRPO exactly.

``estimator: counts`` is the earlier, model-free reading: PMI between a token *id* and the outcome set,
counted over the batch (or each group, ``scope``)::

    p_P(v)     = (c_P(v) + a) / (n_P + a V),  p_all(v) = (c(v) + a) / (n + a V)
    pmi_{i,t}  = log p_{S_i}(y_{i,t}) / p_all(y_{i,t})                  S_i = P (A_i > 0) or N (A_i < 0)
    u_{i,t}    = exp(lam_k * clip(pmi_{i,t}, -c, c))                    (the failed set's PMI: no sign flip)

c(v) counts token id v over the valid tokens of the scope, c_P(v) over those of its positive completions,
V = distinct ids, a = ``smoothing``. It ignores context: a digit right in one problem is wrong in the next,
and pooled across different prompts its counts are mostly noise (SEED-READINGS 000 #22); it stays for
data without a gold answer and as the ablation.

Choices where the abstract is silent:
- "PMI-inspired" is read as PMI between a token and the correct answer, estimated by the policy itself
  with the answer in context (the abstract's cold start trains on *answer-conditioned* chains of
  thought, so an answer-conditioned pass of the same model is the natural estimator). It costs two
  no-grad forwards per batch (with and without the hint). A row whose answer column is empty gets
  pmi = 0 (GRPO's uniform credit).
- "Progressive" is a linear ramp of the modulation strength over ``ramp_steps`` generation batches
  (0 = full strength at once); the batch count is saved in checkpoints.
- Weights are normalized per completion (mean 1 over its valid tokens) so sequence-level credit and
  the loss scale are GRPO's; ``clip`` bounds a single token's weight before normalization.
- Metrics: ``pmi/strength`` (lam_k), ``pmi/weight_max`` and ``pmi/weight_std`` over valid tokens,
  ``pmi/abs_mean`` (mean |pmi| over valid tokens: how much the answer moves the policy's token choices).
- Absent: the agent-routing workflow (agent selection and specialization) and the cold start itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.core.schema import Range

HINTED = "hinted_logps"  # the rollout statistic: log pi(y_t | x (+) hint(row), y_<t) [N, T]


def answer_pmi(logps: torch.Tensor, hinted: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """logps [N, T] log pi(y_t | x, y_<t), hinted [N, T] log pi(y_t | x (+) hint, y_<t), mask [N, T] bool -> pmi [N, T]
    (float64; 0 off the mask, and on rows without a hint: the trainer leaves their hinted log-probs NaN)."""
    t = mask.size(1)
    pmi = hinted[:, :t].double() - logps[:, :t].double()
    return torch.where(mask & ~torch.isnan(pmi), pmi, torch.zeros_like(pmi))


def token_pmi(ids: torch.Tensor, mask: torch.Tensor, sign: torch.Tensor, smoothing: float) -> torch.Tensor:
    """One group: ids [G, T], mask [G, T] bool, sign [G] (+1/-1/0) -> pmi [G, T] (0 off the mask or sign 0)."""
    vocab, inverse = torch.unique(ids[mask], return_inverse=True)
    v = vocab.numel()
    pmi = torch.zeros(ids.shape, dtype=torch.float64)
    if v == 0:
        return pmi
    rows = sign.unsqueeze(1).expand_as(ids)[mask]  # [M] sign of each valid token's completion
    total = torch.bincount(inverse, minlength=v).double()
    p_all = (total + smoothing) / (total.sum() + smoothing * v)
    values = torch.zeros(inverse.numel(), dtype=torch.float64)
    for s in (1, -1):
        own = rows == s
        if not own.any():
            continue
        count = torch.bincount(inverse[own], minlength=v).double()
        p_own = (count + smoothing) / (count.sum() + smoothing * v)
        values[own] = torch.log(p_own[inverse[own]] / p_all[inverse[own]])
    pmi[mask] = values
    return pmi


@ADVANTAGES.register("pmi_tokens")
class PMITokens(Advantage):
    """GRPO advantage redistributed over tokens by success/failure PMI over the batch, ramped in (P-GRPO) [N, T]."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)

    seed = "seed 000 #22"

    @dataclass(frozen=True)
    class Config:
        estimator: Literal["model", "counts"] = "model"  # PMI with the answer by the policy, or token-id counts
        answer_column: str = "answer"  # model: the data column with the correct answer
        hint: str = "The correct answer is {answer}."  # model: appended to x's user turn; {answer}
        strength: Annotated[float, Range(ge=0)] = 1.0  # lam at full ramp: exponent of the PMI weight (0 = GRPO)
        ramp_steps: Annotated[int, Range(ge=0)] = 10  # generation batches to reach full strength (0 = from the start)
        smoothing: Annotated[float, Range(ge=0)] = 1.0  # additive (Laplace) smoothing of the token counts
        clip: Annotated[float, Range(gt=0)] = 2.0  # |PMI| cap before the weight is formed
        scope: Literal["batch", "group"] = "batch"  # counts: where tokens are counted (the batch, or each group)
        scale: Literal["group", "batch", "none"] = "group"  # base advantage: group_norm's std scaling
        eps: Annotated[float, Range(ge=0)] = 1e-4  # base advantage: added to the std

        def __post_init__(self) -> None:
            if self.strength < 0 or self.ramp_steps < 0 or self.smoothing < 0 or self.clip <= 0:
                raise ValueError("strength, ramp_steps and smoothing must be >= 0, clip > 0")
            if "{answer}" not in self.hint:
                raise ValueError("hint must contain {answer} (where the row's answer goes)")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.base = GroupNorm(GroupNorm.Config(scale=self.cfg.scale, eps=self.cfg.eps))
        self.count = 0  # generation batches seen
        if cfg.estimator == "model":  # the trainer's no-grad forwards with and without the hint
            self.requires = frozenset({"logps", HINTED})

    def hint(self, row: dict[str, Any]) -> str | None:
        """The text appended to x's user turn for the hinted forward (None: the row has no answer)."""
        answer = row.get(self.cfg.answer_column)
        if answer is None or str(answer).strip() == "":
            return None
        return self.cfg.hint.format(answer=answer)

    def training_columns(self) -> dict[str, str]:
        return {"algorithm.advantage.answer_column": self.cfg.answer_column} if self.cfg.estimator == "model" else {}

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])

    def strength(self) -> float:
        c = self.cfg
        return c.strength if c.ramp_steps == 0 else c.strength * min(1.0, self.count / c.ramp_steps)

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], completion_ids [N, T], completion_mask [N, T] -> advantages [N, T], metrics."""
        cfg, g = self.cfg, batch.num_generations
        base, metrics = self.base(batch)
        self.count += 1
        lam = self.strength()
        mask = batch.completion_mask > 0
        sign = torch.sign(base).cpu()
        if cfg.estimator == "model":
            pmi = answer_pmi(batch.extras["logps"], batch.extras[HINTED], mask).cpu()
            score = sign.unsqueeze(1) * pmi  # successes credit, failures blame, by agreement with the answer
        else:
            ids = batch.completion_ids[:, : mask.size(1)].cpu()
            size = g if cfg.scope == "group" else len(base)  # rows counted together
            pmi = torch.cat(
                [
                    token_pmi(ids[k : k + size], mask[k : k + size].cpu(), sign[k : k + size], cfg.smoothing)
                    for k in range(0, len(base), size)
                ]
            )
            score = pmi
        u = torch.exp(lam * score.clamp(-cfg.clip, cfg.clip)) * mask.cpu()
        per_row = u.sum(1, keepdim=True) / mask.cpu().sum(1, keepdim=True).clamp(min=1)
        weights = torch.where(mask.cpu(), u / per_row.clamp(min=1e-12), torch.ones_like(u)).to(base.device, base.dtype)
        advantages = base.unsqueeze(1) * weights
        valid_w = weights[mask]
        token_adv = advantages[mask]
        metrics.update(
            {
                "pmi/strength": lam,
                "pmi/abs_mean": float(pmi[mask.cpu()].abs().mean()) if mask.any() else 0.0,
                "pmi/weight_max": float(valid_w.max()) if valid_w.numel() else 1.0,
                "pmi/weight_std": float(valid_w.std()) if valid_w.numel() > 1 else 0.0,
                "advantage/abs_mean": float(token_adv.abs().mean()) if token_adv.numel() else 0.0,
                "advantage/std": float(token_adv.std()) if token_adv.numel() > 1 else 0.0,
            }
        )
        return advantages, metrics

    def describe_pmi(self) -> str:
        if self.cfg.estimator == "model":
            return f"sign(A_i) * PMI(token; answer) by the policy with {self.cfg.answer_column!r} in context"
        return f"PMI(token id; success|failure counted over the {self.cfg.scope})"

    def describe(self) -> str:
        c = self.cfg
        return (
            f"A[i, t] = GRPO A_i * w[i, t], w = exp(lam * clip({self.describe_pmi()}, {c.clip:g})) "
            f"normalized to mean 1 per completion, lam ramped to {c.strength:g} over {c.ramp_steps} batches"
        )
