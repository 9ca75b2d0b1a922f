"""Reference-overlap rewards: ``token_f1`` (000 #19), ``chrf`` and ``bleu`` (sacrebleu; 000 #25, #26).

Each scores the completion's answer against a gold reference column, in [0, 1]::

    token_f1 = 2 P R / (P + R),  P = |c ∩ g| / |c|,  R = |c ∩ g| / |g|   (bags of tokens, SQuAD-style)
    chrf     = sacrebleu sentence chrF  / 100   (char n-grams 1..char_order, word n-grams 1..word_order, F_beta)
    bleu     = sacrebleu sentence BLEU  / 100   (n-grams 1..max_ngram_order, brevity penalty, smoothing)

Choices where the abstracts are silent:
- The answer is the text after a ``</think>`` trace (``strip_think: true``), as the MT seeds score
  the translation and not the reasoning before it.
- token_f1 lowercases, drops punctuation and splits on whitespace (the SQuAD normalization, without
  article removal, which is English-only); both empty gives 1.0, one empty gives 0.0.
- chrF / BLEU are sentence-level (one score per completion, GRPO needs per-sample rewards) with
  sacrebleu's defaults: chrF (char 6, word 0, beta 2; word_order 2 is chrF++), BLEU with "exp"
  smoothing and the "13a" tokenizer. A list-valued reference column is several references.
- A ``None`` reference makes the sample unscorable (``None``).
"""

from __future__ import annotations

import re
import string
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from typing import Annotated, Any

from rlpost.rewards.base import REWARDS, ParamError, answer_text, column
from rlpost.schema import Range


def answers_and_references(reward: Any, completions: list, kwargs: dict) -> list[tuple[str, list[str]] | None]:
    """completions [N] + the reference column [N] -> (answer, references) per sample, None if no reference."""
    refs = column(kwargs, reward.cfg.column, len(completions), reward.registry_name)
    out: list[tuple[str, list[str]] | None] = []
    for completion, ref in zip(completions, refs):
        if ref is None:
            out.append(None)
            continue
        text = answer_text(completion, reward.cfg.strip_think)
        out.append((text.strip(), [str(r) for r in ref] if isinstance(ref, (list, tuple)) else [str(ref)]))
    return out


_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")


def f1_tokens(text: str) -> list[str]:
    """SQuAD-style tokens: lowercase, punctuation removed, whitespace split."""
    return _PUNCT.sub(" ", text.lower()).split()


def token_f1(answer: str, reference: str) -> float:
    """Bag-of-tokens F1 of two strings (see the module docstring)."""
    a, g = f1_tokens(answer), f1_tokens(reference)
    if not a or not g:
        return float(a == g)
    common = sum((Counter(a) & Counter(g)).values())
    if common == 0:
        return 0.0
    p, r = common / len(a), common / len(g)
    return 2 * p * r / (p + r)


@REWARDS.register("token_f1")
class TokenF1:
    """Bag-of-tokens F1 between the answer and the reference (max over several references)."""

    seed = "seed 000 #19"

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the reference (a string or a list of strings)
        strip_think: bool = True  # score only the text after </think>

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> rewards ``[N]`` in [0, 1] (None without a reference)."""
        return [
            None if item is None else max(token_f1(item[0], r) for r in item[1])
            for item in answers_and_references(self, completions, kwargs)
        ]


class SacreBleuReward(ABC):
    """Shared body of chrf and bleu: a sacrebleu sentence metric / 100 per completion."""

    seed = "seed 000 #25, seed 000 #26"
    cfg: Any
    registry_name: str

    @abstractmethod
    def metric(self) -> Any:
        """The configured sacrebleu metric object (``sentence_score(hyp, refs)``)."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.scorer = self.metric()  # built here, so bad params fail before the run starts

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> rewards ``[N]`` in [0, 1] (None without a reference)."""
        return [
            None if item is None else self.scorer.sentence_score(item[0], item[1]).score / 100.0
            for item in answers_and_references(self, completions, kwargs)
        ]


@REWARDS.register("chrf")
class ChrF(SacreBleuReward):
    """Sentence chrF (chrF++ with word_order 2) of the answer against the reference, in [0, 1]."""

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the reference (a string or a list of strings)
        char_order: Annotated[int, Range(ge=1)] = 6  # character n-gram orders 1..char_order
        word_order: Annotated[int, Range(ge=0)] = 0  # word n-gram orders 1..word_order (2 = chrF++)
        beta: Annotated[float, Range(gt=0)] = 2.0  # recall weight of the F-score
        lowercase: bool = False  # compare case-insensitively
        whitespace: bool = False  # keep whitespace in the character n-grams
        strip_think: bool = True  # score only the text after </think>

    def metric(self) -> Any:
        from sacrebleu.metrics import CHRF

        c = self.cfg
        if c.char_order < 1 or c.word_order < 0 or c.beta <= 0:
            raise ParamError("char_order", f"chrf needs char_order >= 1, word_order >= 0, beta > 0; got {c}")
        return CHRF(c.char_order, c.word_order, c.beta, c.lowercase, c.whitespace)


@REWARDS.register("bleu")
class Bleu(SacreBleuReward):
    """Sentence BLEU of the answer against the reference(s), in [0, 1]."""

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the reference (a string or a list of strings)
        max_ngram_order: Annotated[int, Range(ge=1)] = 4  # n-gram orders 1..max_ngram_order
        smooth_method: str = "exp"  # sacrebleu smoothing: none | floor | add-k | exp
        tokenize: str = "13a"  # sacrebleu tokenizer: 13a | intl | char | zh | none ...
        lowercase: bool = False  # compare case-insensitively
        strip_think: bool = True  # score only the text after </think>

    def metric(self) -> Any:
        from sacrebleu.metrics import BLEU

        c = self.cfg
        if c.smooth_method not in BLEU.SMOOTH_DEFAULTS:
            valid = ", ".join(BLEU.SMOOTH_DEFAULTS)
            raise ParamError("smooth_method", f"unknown smoothing {c.smooth_method!r}. Valid choices: {valid}.")
        if c.tokenize not in BLEU.TOKENIZERS:
            raise ParamError(
                "tokenize", f"unknown tokenizer {c.tokenize!r}. Valid choices: {', '.join(BLEU.TOKENIZERS)}."
            )
        if c.max_ngram_order < 1:
            raise ParamError("max_ngram_order", f"must be >= 1, got {c.max_ngram_order}")
        return BLEU(
            lowercase=c.lowercase,
            tokenize=c.tokenize,
            smooth_method=c.smooth_method,
            max_ngram_order=c.max_ngram_order,
            effective_order=True,
        )
