"""``bleu`` (seed 000 #25, #26): sacrebleu sentence BLEU of the completion's answer against the reference(s), / 100::

    bleu = sacrebleu sentence BLEU / 100   (n-grams 1..max_ngram_order, brevity penalty, smoothing)

Choices where the abstracts are silent:
- The answer is the text after a ``</think>`` trace (``strip_think: true``): the MT seeds score the
  translation, not the reasoning before it.
- Sentence-level (one score per completion: GRPO needs per-sample rewards) with sacrebleu's "exp"
  smoothing, the "13a" tokenizer and effective n-gram order. A list-valued reference column is
  several references; a ``None`` reference makes the sample unscorable (``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError, Reward, answers_and_references


@REWARDS.register("bleu")
class Bleu(Reward):
    """Sentence BLEU of the answer against the reference(s), in [0, 1]."""

    seed = "seed 000 #25, seed 000 #26"

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the reference (a string or a list of strings)
        max_ngram_order: Annotated[int, Range(ge=1)] = 4  # n-gram orders 1..max_ngram_order
        smooth_method: str = "exp"  # sacrebleu smoothing: none | floor | add-k | exp
        tokenize: str = "13a"  # sacrebleu tokenizer: 13a | intl | char | zh | none ...
        lowercase: bool = False  # compare case-insensitively
        strip_think: bool = True  # score only the text after </think>

    def __init__(self, cfg: Config):
        super().__init__(cfg)
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
        self.scorer = BLEU(  # built here, so bad params fail before the run starts
            lowercase=c.lowercase,
            tokenize=c.tokenize,
            smooth_method=c.smooth_method,
            max_ngram_order=c.max_ngram_order,
            effective_order=True,
        )

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> rewards ``[N]`` in [0, 1] (None without a reference)."""
        return [
            None if item is None else self.scorer.sentence_score(item[0], item[1]).score / 100.0
            for item in answers_and_references(self, completions, kwargs)
        ]
