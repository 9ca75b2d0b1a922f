"""rank_judge: Ranking-based Reward Construction, RRC (seed 000 #7), on the judge layer.

"Deriving rewards from relative preference rankings [...] self-competitive ranking, which exploits
comparisons among sampled responses, and anchor-guided ranking, which enables scalable
ranking-based reward construction with a small set of reference responses" (seed 000 #7). With
the swapped-order pairwise preference p(a > b) of preference.py:

- ``self_competitive``: each completion's score is its soft win count w_i = sum_{j != i} p(i > j)
  against its group; the group is ranked by w (rank 1 = best, ties share the mean rank) and::

      r_i = (G - rank_i) / (G - 1)               in [0, 1]: best 1, worst 0

- ``anchor``: the row's K reference responses (``anchor_column``: a list of texts, or one text)
  form a ladder; a completion is placed in it by the anchors it beats::

      r_i = (1/K) sum_k ( 1[p(i > a_k) > 1/2] + 1/2 1[p(i > a_k) = 1/2] )

  G K comparisons instead of G (G - 1) / 2, and comparable across groups.

Choices where the abstract is silent: the judge compares pairs (the judge layer scores yes/no or
1-10 prompts; a listwise ranking prompt would need a parser for small judges' free-form lists);
ranks use average ties; anchors count a half win at exactly 1/2 (a judge indifferent in both
orders); a group of one (self-competitive) or a row with no anchor is unscorable (``None``);
pairs whose both judge calls failed are left out of w (self-competitive) or of K (anchor).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rlpost.core.ranks import average_ranks
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError, column
from rlpost.rewards.group import GroupReward
from rlpost.rewards.preference import PAIR_TEMPLATE, PairwiseJudging, make_judge


@REWARDS.register("rank_judge")
class RankJudge(GroupReward):
    """Rewards from a judge's relative ranking: within the group, or against reference anchors."""

    @dataclass(frozen=True)
    class Config:
        mode: Literal["self_competitive", "anchor"] = "self_competitive"  # rank within the group | vs anchors
        anchor_column: str | None = None  # data column with the reference responses (anchor mode)
        judge: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})  # judge backend and its Config
        template: str = PAIR_TEMPLATE  # judge prompt: {question} {response_a} {response_b} {answer_format}
        swap: bool = True  # judge both slot orders and average (position-bias correction)
        strip_think: bool = True  # compare only the text after </think>
        max_response_chars: Annotated[int, Range(ge=1)] = 2000  # responses are cut to this many characters

    def __init__(self, cfg: Config):
        if cfg.mode == "anchor" and not cfg.anchor_column:
            raise ParamError("anchor_column", "mode=anchor needs the data column holding the reference responses")
        super().__init__(cfg)
        self.judge = make_judge(cfg.judge, cfg.template)
        self.pairs = PairwiseJudging(self.judge, cfg.template, cfg.swap, cfg.strip_think, cfg.max_response_chars)

    def score_group(self, prompts: list, completions: list, rows: dict[str, list]) -> tuple[list, dict[str, float]]:
        """``completions [G]`` -> rank rewards ``[G]`` in [0, 1] (None: unscorable)."""
        before = dict(self.judge.stats)
        if self.cfg.mode == "anchor":
            rewards = self._anchor(prompts[0], completions, rows)
        else:
            rewards = self._self_competitive(prompts[0], completions)
        return rewards, self.pairs.stats_delta(before)

    def _self_competitive(self, prompt: Any, completions: list) -> list[float | None]:
        g = len(completions)
        if g < 2:
            return [None] * g
        index = [(i, j) for i in range(g) for j in range(i + 1, g)]
        prefs = self.pairs.preferences(prompt, [(completions[i], completions[j]) for i, j in index])
        wins = [0.0] * g
        for (i, j), p in zip(index, prefs):
            if p is not None:
                wins[i] += p
                wins[j] += 1.0 - p
        return [(g - r) / (g - 1) for r in average_ranks(wins, descending=True)]

    def _anchor(self, prompt: Any, completions: list, rows: dict[str, list]) -> list[float | None]:
        g = len(completions)
        anchors = column(rows, self.cfg.anchor_column, g, "rank_judge")[0]
        anchors = [anchors] if isinstance(anchors, str) else [a for a in (anchors or []) if a]
        if not anchors:
            return [None] * g
        pairs = [(c, a) for c in completions for a in anchors]
        prefs = self.pairs.preferences(prompt, pairs)
        k = len(anchors)
        out: list[float | None] = []
        for i in range(g):
            judged = [p for p in prefs[i * k : (i + 1) * k] if p is not None]
            beaten = sum(1.0 if p > 0.5 else 0.5 if p == 0.5 else 0.0 for p in judged)
            out.append(beaten / len(judged) if judged else None)
        return out
