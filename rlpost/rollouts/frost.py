"""frost: Frost Training (seed 004 #1): gradient-guided token swaps that add higher-scoring rollouts to the group.

For a Cross-Entropy Game (a reward that is a judge LM's log-likelihood, here ``reward=infill_likelihood``)
the reward's gradient with respect to the completion's one-hot tokens says which token swaps should raise
it, as in the Greedy Coordinate Gradient (GCG) attack. After TRL samples each group::

    y*   = the group's best natural rollout (exact judge score)
    repeat ``iterations`` times:
        g          = d r(y*) / d onehot(y*)                       [m, V], through the judge's embeddings
        top_k(i)   = the ``topk`` tokens with the largest g[i, :], per position i
        candidates = ``candidates`` single swaps (i, v), i uniform, v uniform in top_k(i)
        y*         = the best candidate, when its exact score beats y*
    the group's worst natural rollout  <-  y*  (kind ``frost``), when y* improved

so the group gains a rollout the policy did not sample but the judge scores higher: GRPO then pushes
the policy towards it (positive advantage) and away from the rollouts it beat.

Choices where the abstract is silent: the improved rollout replaces the group's worst one (the batch
arithmetic of the run is unchanged; ``per_group`` of them); swaps search the judge's token space and
the result is decoded to text and re-tokenized for the policy (so judge and policy may differ); special
tokens are never proposed; a rollout that did not improve is not inserted. Like every forced row it has
no sampling log-probs (off-policy, corrected by TRL's clipping only). Logged: ``rlpost/rollout/frost/gain``
(judge score of y* minus its start), ``frost/improved_frac``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.rewards.infill_likelihood import InfillLikelihood, middle_text
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy, completion_like

KIND = "frost"


def gcg_step(judge: InfillLikelihood, prefix: list[int], middle: list[int], suffix: list[int], topk: int,
             candidates: int, generator: torch.Generator) -> tuple[list[int], float]:  # fmt: skip
    """One GCG iteration from ``middle`` (judge ids ``[m]``): the best of ``candidates`` gradient-ranked single
    swaps, or ``middle`` itself when none scores higher -> (ids, score)."""
    model, tok = judge.load()
    vocab = model.get_input_embeddings().weight.size(0)
    onehot = torch.zeros(len(middle), vocab, device=model.device)
    onehot[torch.arange(len(middle)), torch.tensor(middle)] = 1.0
    onehot.requires_grad_(True)
    score = judge.score_onehot(prefix, onehot, suffix)
    (grad,) = torch.autograd.grad(score, onehot)  # [m, V]: d score / d onehot
    special = torch.tensor(sorted(set(tok.all_special_ids)), device=grad.device, dtype=torch.long)
    grad[:, special] = -float("inf")
    top = grad.topk(min(topk, vocab), dim=-1).indices.cpu()  # [m, k]
    positions = torch.randint(len(middle), (candidates,), generator=generator)
    picks = torch.randint(top.size(1), (candidates,), generator=generator)
    tries = []
    for i, j in zip(positions.tolist(), picks.tolist()):
        swapped = list(middle)
        swapped[i] = int(top[i, j])
        tries.append(swapped)
    scores = judge.score_ids(prefix, tries, suffix)
    best = int(scores.argmax())
    current = float(score.detach())
    return (tries[best], float(scores[best])) if float(scores[best]) > current else (list(middle), current)


@ROLLOUTS.register("frost")
class Frost(RolloutStrategy):
    """GCG token swaps along the judge's gradient improve the group's best rollout; it replaces the worst."""

    seed = "seed 004 #1"

    @dataclass(frozen=True)
    class Config:
        term: str = "infill_likelihood"  # the reward term whose judge gives the gradient
        iterations: Annotated[int, Range(ge=1)] = 4  # GCG iterations per improved rollout
        topk: Annotated[int, Range(ge=1)] = 32  # candidate tokens per position, by gradient
        candidates: Annotated[int, Range(ge=1)] = 16  # single swaps scored exactly per iteration
        per_group: Annotated[int, Range(ge=1)] = 1  # improved rollouts per group (from its best ones)

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.judge: InfillLikelihood | None = None

    def check_run(self, run: Any) -> None:
        terms = [f for f in run.reward.funcs if isinstance(f, InfillLikelihood) and f.__name__ == self.cfg.term]
        if not terms:
            raise ConfigError(
                f"algorithm/rollout=frost needs the differentiable reward term {self.cfg.term!r} "
                f"(reward=infill_likelihood); reward.terms has {', '.join(run.reward.names)}."
            )
        g = run.settings.train.num_generations
        if self.cfg.per_group >= g:
            raise ConfigError(
                f"algorithm.rollout.per_group={self.cfg.per_group} must be smaller than train.num_generations={g}: "
                "each improved rollout replaces a sampled one."
            )
        self.judge = terms[0]

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        out = ctx.generate(prompts)
        judge = self.judge
        if judge is None:
            raise RuntimeError("frost: check_run did not find its reward term")
        generator = torch.Generator().manual_seed(ctx.rng.randrange(2**31))
        gains, improved = [], 0
        for group in ctx.groups(len(out)):
            row = ctx.rows[group[0]]
            prefix, suffix = str(row[judge.cfg.prefix_column]), str(row[judge.cfg.suffix_column])
            fills = [judge.parts(prefix, middle_text(out.completions[i]), suffix) for i in group]
            scored = [
                (float(judge.score_ids(p, [m], s)[0]) if m else judge.cfg.empty, i)
                for i, (p, m, s) in zip(group, fills)
            ]
            ranked = sorted(scored, reverse=True)
            for (start, i), (_, worst) in zip(ranked[: self.cfg.per_group], ranked[::-1][: self.cfg.per_group]):
                p, m, s = fills[i - group[0]]
                if not m:
                    continue
                score = start
                for _ in range(self.cfg.iterations):
                    m, score = gcg_step(judge, p, m, s, self.cfg.topk, self.cfg.candidates, generator)
                gains.append(score - start)
                if score > start:
                    improved += 1
                    text = judge.tokenizer.decode(m, skip_special_tokens=True).strip()
                    out.force(worst, ctx.completion_ids(text), completion_like(text, out.completions[worst]), KIND)
        if gains:
            ctx.log("frost/gain", sum(gains) / len(gains))
            ctx.log("frost/improved_frac", improved / len(gains))
        return out
