"""core: CoRE, Consensus Rewards via Equilibrium (seed 000 #5), a label-free group reward.

"The N roll-outs form a graph whose edges combine answer agreement, reasoning similarity, and
generation confidence, and replicator dynamics extract its dominant set, yielding a refined
pseudo-label, a graded per-roll-out reward, and a per-question cohesiveness gate. [...] majority
voting is recovered as a special case" (seed 000 #5). Per group, over the m roll-outs with a
parsable answer a_i (the others get 0)::

    W_ij = c_i c_j (alpha A_ij + beta S_ij) / (alpha + beta),  i != j;   W_ii = 0
    x <- x * (W x) / (x^T W x)          from x = 1/m, until |dx|_1 < tol or max_iter
    y_hat = argmax_a sum_{i: a_i = a} x_i            (ties: first answer seen)
    kappa = x^T W x                                  (cohesiveness, in [0, 1])
    pi_i  = clip((W x)_i / kappa, 0, 1)              (support of roll-out i by the dominant set)
    r_i   = 1[a_i = y_hat] ((1 - g) + g pi_i)   if kappa >= gate,  else 0

A_ij = 1[a_i == a_j]; S_ij in [0, 1] is reasoning similarity; c_i in (0, 1] is confidence.

Choices where the abstract is silent (each a config field):
- Zero diagonal (standard dominant sets): kappa is then the average within-set edge weight, so a
  clique of k agreeing roll-outs has kappa = 1 - 1/k and the gate asks for real agreement. When
  W = 0 (no two roll-outs agree, beta = 0) the dynamics stay at the uniform start.
- Similarity (``similarity``): ``jaccard`` of the word uni+bigram sets of the completions
  (cheap, no model), or ``embedding``: the cosine of all-MiniLM-L6-v2 sentence embeddings
  (embeddings.py) clipped to [0, 1].
- Confidence (``confidence``): ``none`` (c = 1) or ``logprob``: c_i = exp(mean token log-prob of
  the completion under the rollout policy), divided by the group's largest, to the power
  ``confidence_power``. The log-prob is the ``rlpost_logprob`` column the trainer adds to the
  reward inputs when a reward declares ``rollout_fields = ("logprob",)`` (trainer.py stage 1c).
- Grading: only roll-outs that hold the pseudo-label are rewarded, graded by their support ``pi``
  (``grading`` = g; a wrong answer never earns reward from similar reasoning alone).
- Majority vote is the case ``agreement_weight > 0, similarity_weight = 0, confidence = none,
  grading = 0, gate = 0``: W is then block-diagonal over answers, each answer's mass after t steps
  is proportional to k (k - 1)^t, increasing in its count k, so y_hat is the mode with the same
  first-seen tie rule (tests/unit/rewards/test_rewards_group.py checks equality with majority_vote).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from rlpost.core.chat import answer_text, completion_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError, column
from rlpost.rewards.group import ANSWER_CHOICES, GroupReward, extract_answer


def word_ngrams(text: str) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return set(words) | {f"{a} {b}" for a, b in zip(words, words[1:])}


def jaccard_matrix(texts: list[str]) -> torch.Tensor:
    """Texts ``[m]`` -> Jaccard similarity of their word uni+bigram sets ``[m, m]`` (empty vs empty = 1)."""
    sets = [word_ngrams(t) for t in texts]
    m = len(sets)
    out = torch.eye(m, dtype=torch.float64)
    for i in range(m):
        for j in range(i + 1, m):
            union = len(sets[i] | sets[j])
            out[i, j] = out[j, i] = len(sets[i] & sets[j]) / union if union else 1.0
    return out


def replicator(w: torch.Tensor, max_iter: int, tol: float) -> torch.Tensor:
    """Replicator dynamics on the payoff matrix ``w [m, m]`` from the barycentre -> ``x [m]``."""
    m = w.size(0)
    x = torch.full((m,), 1.0 / m, dtype=torch.float64)
    for _ in range(max_iter):
        payoff = w @ x
        fitness = float(x @ payoff)
        if fitness <= 0.0:
            break
        new = x * payoff / fitness
        done = float((new - x).abs().sum()) < tol
        x = new
        if done:
            break
    return x


@REWARDS.register("core")
class CoRE(GroupReward):
    """Dominant-set consensus over a group's roll-outs: pseudo-label, graded reward, cohesiveness gate."""

    @dataclass(frozen=True)
    class Config:
        answer: Literal["last_number", "boxed", "text"] = "last_number"  # how an answer is read
        strip_think: bool = True  # read the answer after </think> only (similarity sees the whole text)
        agreement_weight: Annotated[float, Range(ge=0)] = 1.0  # alpha: weight of answer agreement in an edge
        similarity_weight: Annotated[float, Range(ge=0)] = 0.5  # beta: weight of reasoning similarity in an edge
        similarity: Literal["jaccard", "embedding"] = "jaccard"  # reasoning similarity measure
        confidence: Literal["none", "logprob"] = "none"  # generation confidence on the nodes
        confidence_power: Annotated[float, Range(ge=0)] = 1.0  # c_i = (p_i / max p)^power
        grading: Annotated[float, Range(ge=0, le=1)] = 0.5  # g: 0 = binary 1[a_i = y_hat], 1 = fully graded by support
        # questions whose cohesiveness kappa is below this get 0 everywhere
        gate: Annotated[float, Range(ge=0, le=1)] = 0.0
        max_iter: Annotated[int, Range(ge=0)] = 200  # replicator iterations at most
        tol: Annotated[float, Range(ge=0)] = 1.0e-10  # stop when the L1 change of x falls below this
        column: str | None = None  # gold column for the logged label_accuracy only (null: not logged)

        def __post_init__(self) -> None:
            if (
                self.agreement_weight < 0
                or self.similarity_weight < 0
                or self.agreement_weight + self.similarity_weight <= 0
            ):
                raise ParamError("agreement_weight", "agreement_weight and similarity_weight must be >= 0, not both 0")
            for key in ("grading", "gate"):
                if not 0.0 <= getattr(self, key) <= 1.0:
                    raise ParamError(key, f"must be in [0, 1], got {getattr(self, key)}")
            if self.max_iter < 0 or self.confidence_power < 0:
                raise ParamError("max_iter", "max_iter and confidence_power must be >= 0")

    def __init__(self, cfg: Config):
        if cfg.answer not in ANSWER_CHOICES:
            raise ParamError("answer", f"{cfg.answer!r}; choices: {', '.join(ANSWER_CHOICES)}")
        if cfg.similarity not in ("jaccard", "embedding"):
            raise ParamError("similarity", f"{cfg.similarity!r}; choices: jaccard, embedding")
        if cfg.confidence not in ("none", "logprob"):
            raise ParamError("confidence", f"{cfg.confidence!r}; choices: none, logprob")
        if cfg.similarity == "embedding" and cfg.similarity_weight > 0:
            from rlpost.rewards.embeddings import minilm_folder

            minilm_folder()  # a missing wheel fails at build time
        super().__init__(cfg)
        self.rollout_fields = ("logprob",) if cfg.confidence == "logprob" else ()

    def edges(self, answers: list[str], texts: list[str], conf: torch.Tensor) -> torch.Tensor:
        """Answers, texts ``[m]`` and confidences ``[m]`` -> edge weights ``W [m, m]`` in [0, 1]."""
        cfg, m = self.cfg, len(answers)
        agree = torch.tensor([[float(a == b) for b in answers] for a in answers], dtype=torch.float64)
        sim = torch.zeros(m, m, dtype=torch.float64)
        if cfg.similarity_weight > 0:
            if cfg.similarity == "jaccard":
                sim = jaccard_matrix(texts)
            else:
                from rlpost.rewards.embeddings import cosine_matrix

                sim = cosine_matrix(texts).double().clamp(0.0, 1.0)
        w = (cfg.agreement_weight * agree + cfg.similarity_weight * sim) / (
            cfg.agreement_weight + cfg.similarity_weight
        )
        w = w * conf[:, None] * conf[None, :]
        return w.fill_diagonal_(0.0)

    def confidences(self, rows: dict[str, list], keep: list[int], g: int) -> torch.Tensor:
        if self.cfg.confidence == "none" or len(keep) < 2:  # one node: c = p / max p = 1 (held-out eval)
            return torch.ones(len(keep), dtype=torch.float64)
        logps = column(rows, "rlpost_logprob", g, "core")
        p = torch.tensor([math.exp(float(logps[i])) for i in keep], dtype=torch.float64)
        return (p / p.max()).pow(self.cfg.confidence_power)

    def score_group(self, prompts: list, completions: list, rows: dict[str, list]) -> tuple[list, dict[str, float]]:
        """``completions [G]`` -> rewards ``[G]`` in [0, 1]."""
        cfg, g = self.cfg, len(completions)
        answers = [extract_answer(answer_text(c, cfg.strip_think), cfg.answer) for c in completions]
        keep = [i for i, a in enumerate(answers) if a is not None]
        rewards = [0.0] * g
        if not keep:
            return rewards, {"labelled": 0.0}
        kept = [a for a in answers if a is not None]  # the answers of the rows in keep, in order
        w = self.edges(kept, [completion_text(completions[i]) for i in keep], self.confidences(rows, keep, g))
        x = replicator(w, cfg.max_iter, cfg.tol)
        mass: dict[str, float] = {}
        for a, xi in zip(kept, x.tolist()):
            mass[a] = mass.get(a, 0.0) + xi
        top = max(mass.values())
        label = next(a for a, v in mass.items() if v >= top - 1e-12 - 1e-9 * abs(top))  # first seen among ties
        payoff = w @ x
        kappa = float(x @ payoff)
        support = (payoff / kappa).clamp(0.0, 1.0) if kappa > 0 else torch.zeros_like(payoff)
        gated = kappa < cfg.gate
        if not gated:
            for j, i in enumerate(keep):
                if kept[j] == label:
                    rewards[i] = (1.0 - cfg.grading) + cfg.grading * float(support[j])
        counts = {a: kept.count(a) for a in kept}
        metrics = {
            "cohesiveness": kappa,
            "gated": float(gated),
            "labelled": float(not gated),
            "label_is_mode": float(counts[label] == max(counts.values())),
            "dominant_set_size": float((x > 1e-6).sum()),
        }
        if cfg.column and not gated:
            from rlpost.rewards.majority_vote import gold_answer

            metrics["label_accuracy"] = float(gold_answer(column(rows, cfg.column, g, "core")[0], cfg.answer) == label)
        return rewards, metrics
