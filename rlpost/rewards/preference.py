"""Pairwise comparisons by a judge with order swapping: what pairwise_preference (seed 004 #18) and
rank_judge (seed 000 #7) share.

A comparison of responses a and b asks the judge layer (rlpost/judges/, the local SmolLM2 judge
by default) "Is Response A better than Response B?" with a in slot A, and again with the order
swapped ("mitigates judge position bias via repeated comparisons with swapped response order",
seed 004 #18)::

    s_ab = judge(A = a, B = b)      s_ba = judge(A = b, B = a)      (each in [0, 1])
    p(a > b) = (s_ab + 1 - s_ba) / 2

so a judge that always prefers slot A (s = 1 in both orders) yields p = 1/2: no preference. With
``swap: false`` only the first order is asked (p = s_ab; half the calls, position bias kept).
A failed call (judge ``on_failure: skip``) drops its order; when both orders fail the pair is
unjudged (``None``). Judge prompts are built per pair from ``template`` with ``{question}``
(the prompt's last user message), ``{response_a}``, ``{response_b}`` and ``{answer_format}``;
responses are stripped of ``<think>`` traces (``strip_think``) and cut to ``max_response_chars``.
All of a batch's prompts go to the judge in one ``score`` call (the local judge batches them).
"""

from __future__ import annotations

from typing import Any

from rlpost.core.chat import answer_text, prompt_text
from rlpost.core.errors import ConfigError
from rlpost.judges.base import ANSWER_FORMAT, build_judge
from rlpost.rewards.base import ParamError

PAIR_TEMPLATE = (
    "You are comparing two responses to the same task.\n\nTask: {question}\n\n"
    "Response A: {response_a}\n\nResponse B: {response_b}\n\n"
    "Is Response A better than Response B? {answer_format}"
)


def make_judge(node: Any, template: str) -> Any:
    """Build the judge of a pairwise reward (ParamError naming ``judge`` / ``template``)."""
    for key in ("question", "response_a", "response_b", "answer_format"):
        if "{" + key + "}" not in template:
            raise ParamError("template", f"must contain {{{key}}}")
    try:
        return build_judge(node, "")
    except ConfigError as err:
        raise ParamError("judge", str(err).lstrip(": ")) from None


class PairwiseJudging:
    """Preference probabilities p(a > b) for a list of (a, b) text pairs, both orders judged."""

    def __init__(self, judge: Any, template: str, swap: bool, strip_think: bool, max_chars: int):
        self.judge, self.template, self.swap = judge, template, swap
        self.strip_think, self.max_chars = strip_think, max_chars
        self._last: tuple[int, list] = (0, [])  # the last call's pair count and judge scores (last_bias)

    def text(self, completion: Any) -> str:
        return answer_text(completion, self.strip_think)[: self.max_chars]

    def prompt(self, question: str, a: str, b: str) -> str:
        fmt = ANSWER_FORMAT[self.judge.mode]
        return self.template.format(question=question, response_a=a, response_b=b, answer_format=fmt)

    def preferences(self, prompt: Any, pairs: list[tuple[Any, Any]]) -> list[float | None]:
        """``pairs [P]`` of (completion a, completion b) for one prompt -> p(a > b) ``[P]`` (None: unjudged)."""
        question = prompt_text(prompt)
        texts = [(self.text(a), self.text(b)) for a, b in pairs]
        prompts = [self.prompt(question, a, b) for a, b in texts]
        if self.swap:
            prompts += [self.prompt(question, b, a) for a, b in texts]
        scores = self.judge.score(prompts) if prompts else []
        self._last = (len(pairs), scores)
        out: list[float | None] = []
        for k in range(len(pairs)):
            forward = scores[k]
            backward = scores[len(pairs) + k] if self.swap else None
            views = [v for v in (forward, None if backward is None else 1.0 - backward) if v is not None]
            out.append(sum(views) / len(views) if views else None)
        return out

    def last_bias(self) -> float | None:
        """Mean of (s_ab + s_ba) / 2 - 1/2 over the last call's pairs with both orders judged (slot-A lean)."""
        n, scores = self._last
        if not self.swap:
            return None
        both = [(scores[k], scores[n + k]) for k in range(n) if scores[k] is not None and scores[n + k] is not None]
        return sum((a + b) / 2 - 0.5 for a, b in both) / len(both) if both else None

    def stats_delta(self, before: dict[str, int]) -> dict[str, float]:
        return {f"judge_{k}": float(self.judge.stats[k] - before[k]) for k in ("calls", "failures", "cache_hits")}
