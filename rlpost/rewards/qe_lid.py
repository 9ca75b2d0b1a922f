"""qe_lid: reference-free MT quality estimation, averaged over estimators and gated by language
identification (seed 000 #1, MiLMMT: "a reward that averages two reference-free quality estimation
models and is gated by language identification")::

    r_i = gate_i * mean_{k scored} q_ik
    gate_i = 1[ lid(y_i) = target_i  and  conf(target_i | y_i) >= min_confidence ]

``lid`` is lingua (``lingua-language-detector``) built from ``languages`` only (preloading just those
keeps it fast and its confidences comparable); ``conf`` is lingua's confidence of the target
language among them.

The paper's two QE models (COMET-style, e.g. CometKiwi) cannot be had offline, so the default
estimators ``q_ik`` in [0, 1] are ones that run here (``estimators``, default ``[judge, heuristic]``),
and real QE models have their slot:

- ``model``: every QE model of ``qe_models``, each its own term of the mean (rlpost/rewards/qe_model.py:
  a COMET checkpoint through ``unbabel-comet``, or a 1-label sequence-classifier folder, ``qe_kind``).
  ``estimators: [model]`` with two ``qe_models`` is the paper's reward in one term:
  ``gate * (q_1 + q_2) / 2``. Here the QE models are T9 classifiers that ``rlpost train-rm`` trains on the
  bundled translation pairs against corrupted translations (rlpost/dev/make_qe_pairs.py,
  recipes/milmmt_mt.yaml).

- ``judge``: a local LM judge (rlpost/judges/, SmolLM2-135M-Instruct by default) asked whether the
  output is an accurate, fluent translation of the source into the target language; yes/no mode
  gives P(Yes). It is the only adequacy signal available offline. What it can see: both sides, the
  target language's name, gross failures (empty, off-topic, untranslated). What it cannot: a 135M
  model reads German or French poorly, so meaning errors, wrong terms and dropped clauses in a fluent
  output mostly pass, and its P(Yes) varies with surface features; a trained QE model (``model``)
  scores exactly those.
- ``heuristic`` = ``length * no_copy``, cross-lingual surface checks that catch what a small judge
  misses (empty, truncated, runaway or copied outputs); deterministic and free:
    ``length  = min(rho, l) / max(rho, l)``, ``rho = chars(y) / chars(x)``, ``l = length_ratio``
    ``no_copy = 1 - |{w in W(y): w in W(x)}| / |W(y)|``, W = lowercased words of >= copy_min_chars
    letters (short words and numbers are shared across languages legitimately); ``W(y)`` empty -> 1.
- ``length`` and ``no_copy`` alone are also estimators (a deterministic pair for tests and ablations).
A back-translation chrF was not chosen: it needs a generation per sample from the local model.

Choices where the abstract is silent:
- Gated-out samples get 0 (not None: a wrong-language translation is bad, not unscorable) and are
  not sent to the judge (saves judge calls). Empty output, or output lingua cannot place (digits,
  punctuation), is gated out.
- The mean is over the estimators that scored (a failed judge call under ``on_failure=skip`` leaves
  it out); no estimator scored -> None.
- The source text comes from ``source_column``; the target language from ``target_column`` (per
  row, ISO 639-1 code or English name, e.g. "de" / "German") or, when that is null, ``target``.
- Logged per batch: ``qe_lid/gate`` (pass rate) and ``qe_lid/<estimator>`` (mean over gated-in); the
  QE models as ``qe_lid/model_<i>`` (``i`` their index in ``qe_models``).
- ``estimators: [judge, model]`` with two ``qe_models`` averages three terms, each weighted alike (the
  mean is over terms, not over estimator names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rlpost.core.chat import answer_text
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.judges.base import ANSWER_FORMAT, build_judge
from rlpost.rewards.base import REWARDS, ParamError, Reward, column
from rlpost.rewards.qe_model import QEModel

ESTIMATORS = ("judge", "heuristic", "length", "no_copy", "model")
JUDGE_TEMPLATE = (
    "Source ({source_lang}): {source}\n\nTranslation ({target_lang}): {translation}\n\n"
    "Is the translation an accurate and fluent {target_lang} translation of the source? {answer_format}"
)
_WORD = re.compile(r"[^\W\d_]+")


def language(code: str) -> Any:
    """An ISO 639-1 code ("de") or English name ("German") -> lingua Language; ValueError if unknown."""
    from lingua import IsoCode639_1, Language

    key = str(code).strip()
    if len(key) == 2 and hasattr(IsoCode639_1, key.upper()):
        return Language.from_iso_code_639_1(getattr(IsoCode639_1, key.upper()))
    if hasattr(Language, key.upper()):
        return getattr(Language, key.upper())
    raise ValueError(f"unknown language {code!r}: use an ISO 639-1 code (de, fr, ...) or a lingua name (German)")


def length_score(source: str, output: str, ratio: float) -> float:
    """min(rho, ratio) / max(rho, ratio) with rho = chars(output) / chars(source); 0 for an empty side."""
    if not source or not output:
        return 0.0
    rho = len(output) / len(source)
    return min(rho, ratio) / max(rho, ratio)


def no_copy_score(source: str, output: str, min_chars: int) -> float:
    """1 - the fraction of the output's words (>= min_chars letters, lowercased) found in the source."""
    words = [w for w in _WORD.findall(output.lower()) if len(w) >= min_chars]
    if not words:
        return 1.0
    src = set(_WORD.findall(source.lower()))
    return 1.0 - sum(w in src for w in words) / len(words)


@REWARDS.register("qe_lid")
class QeLid(Reward):
    """Mean of reference-free QE estimators, times a language-identification gate, in [0, 1]."""

    seed = "seed 000 #1"

    @dataclass(frozen=True)
    class Config:
        estimators: tuple[str, ...] = (
            "judge",
            "heuristic",
        )  # QE estimators averaged: judge | heuristic | length | no_copy | model (each of qe_models)
        languages: tuple[str, ...] = ("en", "de", "fr")  # languages lingua loads (targets and sources)
        target: str | None = None  # the target language for every row (used when target_column is null)
        target_column: str | None = "target_lang"  # data column with each row's target language
        source_column: str = "source"  # data column with the source text
        source_lang: str = "English"  # source language name shown to the judge
        # lingua confidence of the target language needed to pass the gate
        min_confidence: Annotated[float, Range(ge=0, le=1)] = 0.5
        # expected chars(translation) / chars(source) of the length estimator
        length_ratio: Annotated[float, Range(gt=0)] = 1.0
        copy_min_chars: Annotated[int, Range(ge=1)] = 4  # words shorter than this are ignored by no_copy
        judge: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})  # judge backend and its Config
        # judge prompt: {source} {translation} {source_lang} {target_lang} {answer_format}
        template: str = JUDGE_TEMPLATE
        strip_think: bool = True  # score only the text after </think>
        # the QE models of estimator `model`, each a term of the mean: COMET names / .ckpt (qe_kind=comet)
        # or classifier folders (qe_kind=classifier, e.g. what `rlpost train-rm` writes)
        qe_models: tuple[str, ...] = ()
        qe_kind: Literal["comet", "classifier"] = "comet"  # how every qe_models entry loads (qe_model.py)

        def __post_init__(self) -> None:
            if not 0.0 <= self.min_confidence <= 1.0 or self.length_ratio <= 0 or self.copy_min_chars < 1:
                raise ParamError(
                    "min_confidence", "needs 0 <= min_confidence <= 1, length_ratio > 0, copy_min_chars >= 1"
                )

    def __init__(self, cfg: Config):
        from lingua import LanguageDetectorBuilder

        super().__init__(cfg)
        bad = [e for e in cfg.estimators if e not in ESTIMATORS]
        if bad or not cfg.estimators:
            raise ParamError("estimators", f"unknown {bad or '(empty list)'}. Valid choices: {', '.join(ESTIMATORS)}.")
        try:
            self.languages = {language(code) for code in cfg.languages}
        except ValueError as err:
            raise ParamError("languages", str(err)) from None
        if len(self.languages) < 2:
            raise ParamError("languages", "lingua needs at least two languages to tell apart")
        if cfg.target_column is None and cfg.target is None:
            raise ParamError("target", "set target (one language for all rows) or target_column")
        if cfg.target is not None:
            try:
                self.target_of(cfg.target)
            except ValueError as err:
                raise ParamError("target", str(err)) from None
        self.detector = LanguageDetectorBuilder.from_languages(*self.languages).build()
        self.qe_models: list[QEModel] = []
        if "model" in cfg.estimators and not cfg.qe_models:
            raise ParamError("qe_models", "estimator 'model' needs qe_models (COMET names or classifier folders)")
        if cfg.qe_models and "model" not in cfg.estimators:
            raise ParamError("qe_models", "is set but estimators has no 'model', so no QE model would score")
        for i, name in enumerate(cfg.qe_models):
            try:
                self.qe_models.append(QEModel(name, cfg.qe_kind))
            except ConfigError as err:
                raise ParamError("qe_models", f"[{i}] {err}") from None
        self.judge = None
        if "judge" in cfg.estimators:
            try:
                self.judge = build_judge(cfg.judge, "")
            except ConfigError as err:
                raise ParamError("judge", str(err).lstrip(": ")) from None

    def target_of(self, code: Any) -> Any:
        """A target language code or name -> lingua Language; ValueError if unknown or not loaded."""
        lang = language(code)
        if lang not in self.languages:
            raise ValueError(f"{lang.name.title()} is not among languages {list(self.cfg.languages)}")
        return lang

    def targets(self, codes: list[Any]) -> list[Any]:
        """The batch's target languages ``[N]``; a bad column value names the reward and column."""
        try:
            return [self.target_of(code) for code in codes]
        except ValueError as err:
            raise ValueError(f"reward 'qe_lid', {self.cfg.target_column or 'target'}: {err}") from None

    def gate(self, text: str, target: Any) -> float:
        """1.0 when lingua places ``text`` in ``target`` with confidence >= min_confidence, else 0.0."""
        if not text.strip() or self.detector.detect_language_of(text) != target:
            return 0.0
        return float(self.detector.compute_language_confidence(text, target) >= self.cfg.min_confidence)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> ``gate * mean(terms)`` ``[N]`` in [0, 1] (None: nothing scored); the terms are
        the estimators, with ``model`` expanded to one term per QE model."""
        cfg, n = self.cfg, len(completions)
        sources = [str(s) for s in column(kwargs, cfg.source_column, n, "qe_lid")]
        codes = column(kwargs, cfg.target_column, n, "qe_lid") if cfg.target_column else [cfg.target] * n
        targets = self.targets(codes)
        outputs = [answer_text(c, cfg.strip_think).strip() for c in completions]
        gates = [self.gate(y, t) for y, t in zip(outputs, targets)]
        kept = [i for i in range(n) if gates[i] > 0]
        scores: dict[str, list[float | None]] = {}  # one entry per term of the mean
        kept_sources, kept_outputs = [sources[i] for i in kept], [outputs[i] for i in kept]
        for name in self.terms():
            scores[name] = self.estimate(name, kept_sources, kept_outputs, [targets[i] for i in kept])
        rewards: list[float | None] = [0.0] * n
        for j, i in enumerate(kept):
            values = [v for v in (s[j] for s in scores.values()) if v is not None]
            rewards[i] = sum(values) / len(values) if values else None
        self._log(kwargs, gates, scores)
        return rewards

    def terms(self) -> list[str]:
        """The terms of the mean: the estimators in order, ``model`` expanded to ``model_0 .. model_{M-1}``."""
        names: list[str] = []
        for name in self.cfg.estimators:
            names += [f"model_{k}" for k in range(len(self.qe_models))] if name == "model" else [name]
        return names

    def estimate(self, name: str, sources: list[str], outputs: list[str], targets: list[Any]) -> list[float | None]:
        """One term (``terms()``) over the gated-in samples ``[K]`` -> scores ``[K]`` in [0, 1] (None: judge failed)."""
        cfg = self.cfg
        if name == "length":
            return [length_score(x, y, cfg.length_ratio) for x, y in zip(sources, outputs)]
        if name == "no_copy":
            return [no_copy_score(x, y, cfg.copy_min_chars) for x, y in zip(sources, outputs)]
        if name == "heuristic":
            return [
                length_score(x, y, cfg.length_ratio) * no_copy_score(x, y, cfg.copy_min_chars)
                for x, y in zip(sources, outputs)
            ]
        if name.startswith("model_"):  # one QE model of qe_models
            return list(self.qe_models[int(name.removeprefix("model_"))].scores(sources, outputs))
        if not sources:
            return []
        assert self.judge is not None, f"estimator {name!r} needs qe_lid's judge"
        prompts = [
            cfg.template.format(
                source=x,
                translation=y,
                source_lang=cfg.source_lang,
                target_lang=t.name.title(),
                answer_format=ANSWER_FORMAT[self.judge.mode],
            )
            for x, y, t in zip(sources, outputs, targets)
        ]
        return self.judge.score(prompts)

    def _log(self, kwargs: dict, gates: list[float], scores: dict[str, list[float | None]]) -> None:
        log = kwargs.get("log_metric")
        if not callable(log) or not gates:
            return
        log("qe_lid/gate", sum(gates) / len(gates))
        for name, values in scores.items():
            done = [v for v in values if v is not None]
            if done:
                log(f"qe_lid/{name}", sum(done) / len(done))
