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
arithmetic of the run is unchanged; ``per_group`` of them); swaps search the judge's token space; special
tokens are never proposed; a rollout that did not improve is not inserted. Like every forced row it has
no sampling log-probs (off-policy, corrected by TRL's clipping only).

The round trip. GCG scores token ids, but the reward scores text: the inserted row's ids are decoded, the
row's completion text is what the policy's ids of it decode to (as TRL decodes a sampled row), and the reward
re-tokenizes that text (``middle_text``: first line, no quotes, ``" " + fill``, cut to ``max_middle_tokens``).
A swap can break that round trip (a token without a leading space first, a newline, a merge with its
neighbour: the reward then scores other ids than GCG did, and GCG's score overstates what the row earns).
So, as in GCG's own candidate filter, a proposed swap is scored only when its round trip is exact (``as_row``)::

    judge ids m -> text = judge.decode(m) -> completion ids = policy.encode(text) + EOS
                -> completion = policy.decode(completion ids) -> reward ids m' = judge ids of middle_text(completion)
    kept iff m' == m

The inserted row is then GCG's ids as each model sees them: the reward scores exactly ``m`` (the row's reward is
GCG's score), and where judge and policy share a byte-level tokenizer (``judge: null``, a copy of the run's model)
the row's completion ids are ``m`` then EOS, so the policy trains on the tokens GCG chose.

Logged under ``rlpost/rollout/``: ``frost/gain`` (GCG's score of y* minus its start, per searched group),
``frost/realized_gain`` (the reward the inserted row's completion gets, ``InfillLikelihood.score_fill``, minus
the start; 0 where nothing was inserted: equal to ``gain`` up to float rounding when the round trip holds),
``frost/improved_frac`` and ``frost/roundtrip_exact_frac`` (the share of proposed swaps whose round trip was
exact: how much of GCG's search the filter spends). ``Frost.last`` keeps the last batch's searches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.rewards.infill_likelihood import InfillLikelihood, middle_text
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy, completion_like

KIND = "frost"


@dataclass(frozen=True)
class GcgStep:
    """One GCG iteration's result."""

    ids: list[int]  # [m] the judge ids kept: the best exact swap, or the start
    score: float  # their exact judge score
    exact: int  # of the proposed swaps, how many had an exact round trip (were scored)


@dataclass(frozen=True)
class Search:
    """One group's GCG search (``Frost.last``: for logs and tests)."""

    group: int  # the group's first row
    start: float  # the reward of the group's best natural row, where the search began
    ids: list[int]  # [m] the judge ids GCG ended on
    score: float  # GCG's score of ``ids``
    row: int | None  # the row the improved rollout replaced (None: not improved, nothing inserted)
    completion_ids: list[int] | None  # the inserted row's completion ids (policy ids, then EOS)
    reward: float | None  # the reward the inserted row's completion gets (``score_fill``)


def judge_roundtrip(judge: InfillLikelihood, middle: list[int]) -> list[int]:
    """The judge ids the reward scores once ``middle`` (judge ids ``[m]``) is decoded to text (the judge side of
    the round trip, without the policy's tokenizer)."""
    return judge.middle_ids(middle_text(judge.load()[1].decode(middle)))


def as_row(judge: InfillLikelihood, ctx: RolloutContext, middle: list[int]) -> tuple[list[int], str, list[int]]:
    """Judge ids ``[m]`` as an inserted row -> (its completion ids: the policy's ids of their text, then EOS; its
    completion text: those ids decoded as TRL decodes a sampled row; the judge ids ``[m']`` the reward scores)."""
    ids = ctx.completion_ids(judge.load()[1].decode(middle))
    text = ctx.tokenizer.decode(ids, skip_special_tokens=True)
    return ids, text, judge.middle_ids(middle_text(text))


def gcg_step(judge: InfillLikelihood, prefix: list[int], middle: list[int], suffix: list[int], topk: int,
             candidates: int, generator: torch.Generator,
             scored_as: Callable[[list[int]], list[int]] | None = None) -> GcgStep:  # fmt: skip
    """One GCG iteration from ``middle`` (judge ids ``[m]``): the best of ``candidates`` gradient-ranked single
    swaps whose round trip is exact (``scored_as(ids) == ids``: the ids the reward scores once they are inserted;
    default ``judge_roundtrip``), or ``middle`` itself when none scores higher."""
    model, tok = judge.load()
    scored_as = scored_as or (lambda ids: judge_roundtrip(judge, ids))
    vocab = model.get_input_embeddings().weight.size(0)
    onehot = torch.zeros(len(middle), vocab, device=model.device)
    onehot[torch.arange(len(middle)), torch.tensor(middle)] = 1.0
    onehot.requires_grad_(True)
    score = judge.score_onehot(prefix, onehot, suffix)
    (grad,) = torch.autograd.grad(score, onehot)  # [m, V]: d score / d onehot
    special = sorted(i for i in set(tok.all_special_ids) if i < vocab)
    grad[:, torch.tensor(special, device=grad.device, dtype=torch.long)] = -float("inf")
    top = grad.topk(min(topk, vocab - len(special)), dim=-1).indices.cpu()  # [m, k], never a special token
    positions = torch.randint(len(middle), (candidates,), generator=generator)
    picks = torch.randint(top.size(1), (candidates,), generator=generator)
    tries = []
    for i, j in zip(positions.tolist(), picks.tolist()):
        swapped = list(middle)
        swapped[i] = int(top[i, j])
        if scored_as(swapped) == swapped:  # else the reward would score other ids than these
            tries.append(swapped)
    current = float(score.detach())
    if not tries:
        return GcgStep(list(middle), current, 0)
    scores = judge.score_ids(prefix, tries, suffix)
    best = int(scores.argmax())
    if float(scores[best]) > current:
        return GcgStep(tries[best], float(scores[best]), len(tries))
    return GcgStep(list(middle), current, len(tries))


@ROLLOUTS.register("frost")
class Frost(RolloutStrategy):
    """GCG token swaps along the judge's gradient improve the group's best rollout; it replaces the worst."""

    seed = "seed 004 #1"

    @dataclass(frozen=True)
    class Config:
        term: str = "infill_likelihood"  # the reward term whose judge gives the gradient
        iterations: Annotated[int, Range(ge=1)] = 4  # GCG iterations per improved rollout
        topk: Annotated[int, Range(ge=1)] = 32  # candidate tokens per position, by gradient
        candidates: Annotated[int, Range(ge=1)] = 16  # single swaps proposed per iteration (exact ones scored)
        per_group: Annotated[int, Range(ge=1)] = 1  # improved rollouts per group (from its best ones)

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.judge: InfillLikelihood | None = None
        self.last: list[Search] = []  # the last batch's searches

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
        scored_as = lambda ids: as_row(judge, ctx, ids)[2]  # noqa: E731
        self.last, proposed, exact = [], 0, 0
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
                    step = gcg_step(judge, p, m, s, self.cfg.topk, self.cfg.candidates, generator, scored_as)
                    m, score = step.ids, step.score
                    proposed, exact = proposed + self.cfg.candidates, exact + step.exact
                if score <= start:
                    self.last.append(Search(group[0], start, m, score, None, None, None))
                    continue
                ids, text, reward_ids = as_row(judge, ctx, m)
                if reward_ids != m:  # every kept swap had an exact round trip
                    raise RuntimeError("frost: an improved fill lost its round trip")
                completion = completion_like(text, out.completions[worst])
                out.force(worst, ids, completion, KIND)
                reward = judge.score_fill(prefix, middle_text(completion), suffix)  # what the trainer will score
                self.last.append(Search(group[0], start, m, score, worst, ids, reward))
        if self.last:
            n = len(self.last)
            ctx.log("frost/gain", sum(x.score - x.start for x in self.last) / n)
            ctx.log("frost/realized_gain", sum(x.reward - x.start for x in self.last if x.reward is not None) / n)
            ctx.log("frost/improved_frac", sum(x.row is not None for x in self.last) / n)
            ctx.log("frost/roundtrip_exact_frac", exact / proposed)
        return out
