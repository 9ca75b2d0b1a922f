"""A real quality-estimation model for ``qe_lid``'s ``model`` estimator, loaded by name (seed 000 #1).

MiLMMT averages two reference-free QE models (COMET-style, e.g. CometKiwi). Two kinds load here:

- ``comet``: a COMET checkpoint through the ``unbabel-comet`` package (``pip install unbabel-comet``),
  by Hugging Face name (``Unbabel/wmt22-cometkiwi-da``, from the local cache when offline) or by the path
  of a ``.ckpt``. Each sample is ``{"src": source, "mt": translation}``; COMET's score is clipped to [0, 1].
- ``classifier``: a folder of a 1-label ``*ForSequenceClassification``. A folder ``rlpost train-rm`` wrote
  (it holds ``rlpost_reward_model.json``) is read as it was trained: the prompt ``qe_prompt(source)`` and
  the translation rendered by ``rlpost.reward_model.pairs.render`` (chat template or plain, as its
  metadata says; last ``max_length`` tokens), and its scalar ``s`` mapped to
  ``sigmoid((s - score_mean) / score_std)`` with the held-out mean/std train-rm stored (a Bradley-Terry
  scalar has no fixed scale; standardizing puts the held-out midpoint at 0.5, so it averages with the
  other estimators' [0, 1] scores). Any other folder reads ``source + "\\n" + translation`` and gives
  ``sigmoid(logit)``.

Both load on the first call, on the policy's device, in eval mode with no grad. No weights are bundled:
the T9 QE classifier is trained here from the bundled translation pairs (``python -m
rlpost.dev.make_qe_pairs``, then ``rlpost train-rm``; recipes/milmmt_mt.yaml), COMET needs a download.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Literal

import torch

from rlpost.core.errors import ConfigError

QEKind = Literal["comet", "classifier"]


def qe_prompt(source: str) -> str:
    """The prompt a QE classifier reads before the translation: the source sentence and a newline. The
    QE training pairs (rlpost/dev/make_qe_pairs.py) are written with it, so training and scoring agree."""
    return f"{source}\n"


def check_qe_model(name: str, kind: QEKind) -> tuple[str, dict]:
    """ConfigError before anything loads: the package (comet) or the folder (classifier) is missing.
    Returns (what to load: the name, or the resolved folder; the folder's train-rm metadata, {} for COMET
    or a folder without it)."""
    if kind == "comet":
        if importlib.util.find_spec("comet") is None:
            raise ConfigError(
                f"qe_model={name!r} (qe_kind=comet) needs the unbabel-comet package: pip install unbabel-comet "
                "(and the model in the Hugging Face cache when offline), or use qe_kind=classifier with a "
                "sequence-classifier folder."
            )
        return name, {}
    from rlpost.rewards.reward_model import check_classifier_folder

    folder, meta = check_classifier_folder(name)
    if meta.get("features"):
        raise ConfigError(
            f"qe_model={name!r} was trained with the rows' features {meta['features']} (train-rm "
            "context_only=false); a QE model reads only the source and the translation."
        )
    return folder, meta


class QEModel:
    """``scores(sources [K], translations [K]) -> [K]`` in [0, 1] from a COMET model or a classifier folder."""

    def __init__(self, name: str, kind: QEKind, batch_size: int = 8, max_length: int = 512):
        self.path, self.meta = check_qe_model(name, kind)
        self.name, self.kind, self.batch_size, self.max_length = name, kind, batch_size, max_length
        self._model: Any = None
        self._tokenizer: Any = None

    def __getstate__(self) -> dict:  # TRL's rollout workers: reload lazily there
        return {**self.__dict__, "_model": None, "_tokenizer": None}

    def scores(self, sources: list[str], translations: list[str]) -> list[float]:
        if not sources:
            return []
        if self.kind == "comet":
            return self._comet(sources, translations)
        return self._classifier(sources, translations)

    def _comet(self, sources: list[str], translations: list[str]) -> list[float]:
        from comet import download_model, load_from_checkpoint

        if self._model is None:
            path = self.path if os.path.exists(self.path) else download_model(self.path)
            self._model = load_from_checkpoint(path)
        data = [{"src": s, "mt": t} for s, t in zip(sources, translations)]
        out = self._model.predict(
            data, batch_size=self.batch_size, gpus=int(torch.cuda.is_available()), progress_bar=False
        )
        return [min(1.0, max(0.0, float(s))) for s in out.scores]

    def _classifier(self, sources: list[str], translations: list[str]) -> list[float]:
        from accelerate import PartialState
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from rlpost.reward_model.pairs import encode, render, score_ids

        if self._model is None:
            tokenizer = AutoTokenizer.from_pretrained(self.path, trust_remote_code=False)
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            model = AutoModelForSequenceClassification.from_pretrained(
                self.path, use_safetensors=True, trust_remote_code=False
            )
            model.config.pad_token_id = tokenizer.pad_token_id
            self._model = model.to(PartialState().device).eval().requires_grad_(False)
            self._tokenizer = tokenizer
        tokenizer, meta = self._tokenizer, self.meta
        if not meta:  # a classifier from elsewhere: source, newline, translation; sigmoid of its logit
            ids = encode(tokenizer, [f"{s}\n{t}" for s, t in zip(sources, translations)], self.max_length)
            return torch.sigmoid(score_ids(self._model, ids, tokenizer.pad_token_id, self.batch_size)).tolist()
        conversational = bool(meta.get("conversational", True))
        texts = [render(tokenizer, qe_prompt(s), t, conversational) for s, t in zip(sources, translations)]
        ids = encode(tokenizer, texts, int(meta.get("max_length", self.max_length)))
        scores = score_ids(self._model, ids, tokenizer.pad_token_id, self.batch_size)  # [K]
        std = float(meta.get("score_std") or 1.0)
        return torch.sigmoid((scores - float(meta.get("score_mean", 0.0))) / std).tolist()
