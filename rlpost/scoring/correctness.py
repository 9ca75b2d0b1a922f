"""``eval/accuracy``'s criterion: which reward term says a completion is right, and from what score on.

Accuracy is a claim about correctness, so it is only reported where a term checks the answer against
a gold reference: a *verifiable* term (``Reward.is_verifiable``: math_answer, exact_match,
choice_or_text, code_exec, ternary_abstention, and ``env`` when its environment checks the outcome
against the row's gold: calculator, python, search, code_repair, simulated_user). A judged or learned score (a rubric, a reward model,
BLEU) is a reward, reported as ``eval/reward``; calling its mean an accuracy would mislead.

``eval.correct_term`` picks the term: ``auto`` (the first verifiable term of ``reward.terms``, none
when no term is verifiable), a term's name (``reward_names``, e.g. ``callable`` or ``env`` when the
user knows that term is a correctness check), or null (no accuracy). A sample is correct when that
term scores at least ``eval.correct_threshold`` (1.0: full marks; code_exec's fraction of tests
passed must be 1). A sample the term did not score (None/NaN: not applicable, or its scoring failed)
counts in neither the numerator nor the denominator of the accuracy, as the reward means skip it;
pass@k and maj@k count it as wrong (rlpost/evaluation/evaluate.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlpost.core.errors import ConfigError

AUTO = "auto"


@dataclass(frozen=True)
class Correctness:
    """Reward term ``index`` (named ``name``) decides correctness: score >= ``threshold``."""

    index: int
    name: str
    threshold: float = 1.0

    def correct(self, scores: torch.Tensor) -> torch.Tensor:
        """Reward terms ``[..., R]`` (NaN = unscored) -> bool ``[...]``; unscored samples are False."""
        return scores[..., self.index] >= self.threshold  # NaN >= t is False

    def scored(self, scores: torch.Tensor) -> torch.Tensor:
        """bool ``[...]``: the term scored the sample (not None/NaN)."""
        return ~torch.isnan(scores[..., self.index])

    def accuracy(self, scores: torch.Tensor) -> float:
        """Share of the scored samples of ``scores [N, R]`` that are correct (NaN when none was scored)."""
        scored = self.scored(scores)
        if not scored.any():
            return float("nan")
        return self.correct(scores)[scored].float().mean().item()


def verifiable_terms(funcs: Sequence[Any], env: Any = None) -> list[bool]:
    """``[R]``: which reward columns check correctness (``Reward.is_verifiable``; ``env`` for the env term)."""
    from rlpost.rewards.base import Reward

    return [isinstance(func, Reward) and func.is_verifiable(env) for func in funcs]


def find_correctness(
    verifiable: Sequence[bool], names: Sequence[str], term: str | None, threshold: float, key: str = "eval"
) -> Correctness | None:
    """The criterion ``term`` names among the reward columns (``verifiable`` [R], ``names`` [R]); None when
    there is none. A name that is no column is a ConfigError listing the columns."""
    if term is None:
        return None
    if term == AUTO:
        index = next((i for i, v in enumerate(verifiable) if v), None)
        return None if index is None else Correctness(index, names[index], threshold)
    if term not in names:
        raise ConfigError(
            f"{key + '.' if key else ''}correct_term={term!r} is not a reward term of this run; its terms are: {', '.join(names)} "
            f"(or auto: the first verifiable term, or null: no accuracy)."
        )
    return Correctness(list(names).index(term), term, threshold)


def no_accuracy_reason(names: Sequence[str]) -> str:
    """Why a run has no ``eval/accuracy``, for error messages."""
    from rlpost.rewards.base import REWARDS

    verifiable = [n for n in REWARDS.names() if REWARDS.get(n).verifiable]
    return (
        f"no reward term of this run checks correctness (terms: {', '.join(names)}; the verifiable ones are "
        f"{', '.join(verifiable)}, and env with an environment that checks answers)"
    )
