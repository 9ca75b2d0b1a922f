"""reward_model: the scalar of a trained sequence classifier (``rlpost train-rm``) on prompt + completion.

The "reward model" reward of METHODS.md section 3 (issue 9). ``path`` is a folder that loads with
``AutoModelForSequenceClassification`` and has one label; ``rlpost train-rm`` writes one to
``<run>/model/``. It is checked when the reward is built (folder, ``config.json``, a
``*ForSequenceClassification`` architecture, ``num_labels == 1``), so a bad path is a
``ConfigError`` before any model loads; the weights load on the first call, on the policy's device
(accelerate's ``PartialState().device``: the process's GPU, else the CPU), in eval mode, no grad.

Choices where nothing dictated one:
- Inputs are rendered with ``rlpost.reward_model.pairs.render``, as in training: the chat template
  when the folder's ``rlpost_reward_model.json`` says ``conversational`` (a folder without it:
  the ``conversational`` param, default true); the last ``max_length`` tokens are kept.
- ``normalize``: ``none`` (raw scores), ``batch`` ((r - mean) / std over the N completions this
  process scores at once, population std, eps 1e-6: with several processes each normalizes its own
  share), ``heldout`` ((r - mean) / std of the RM's held-out scores, stored by train-rm; fixed over
  the run, so rewards stay comparable between steps).
- The model is dropped when the reward is pickled (TRL's rollout workers) and reloads lazily there.
- A regression reward model (``train-rm objective=regression``, KARMA, seed 004 #3) that reads its rows'
  features (``context_only=false``) sees them here from the data columns of the same names, rendered as
  in training (rlpost/reward_model/valuations.py); a batch without those columns is an error naming
  them. A context-only model reads the conversation alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import PathSpec, Range, path_kind
from rlpost.reward_model.pairs import RM_META, encode, score_ids
from rlpost.reward_model.regression import render_row
from rlpost.rewards.base import REWARDS, ParamError, Reward


@path_kind("classifier_folder", "a reward-model folder (a 1-label *ForSequenceClassification) from `rlpost train-rm`")
def check_classifier_path(path: str, key: str, _cfg: Any) -> None:
    """The ``path`` param, checked before the reward is built: ConfigError naming the full key."""
    try:
        check_classifier_folder(path)
    except ParamError as err:
        raise ConfigError(f"{key}: {err.message}") from None


def check_classifier_folder(path: str) -> tuple[str, dict]:
    """The resolved folder and its rlpost metadata ({} when absent); ParamError on the ``path`` key."""
    from rlpost.core.schema import resolve_data_path

    folder = resolve_data_path(os.path.expanduser(path))
    hint = "train one with `rlpost train-rm` (it writes <run dir>/model/)"
    if not os.path.isdir(folder):
        raise ParamError("path", f"{path!r}: no such folder; {hint}.")
    config_file = os.path.join(folder, "config.json")
    if not os.path.isfile(config_file):
        raise ParamError("path", f"{path!r} has no config.json, so it is not a model folder; {hint}.")
    try:
        with open(config_file, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, not JSON
        raise ParamError("path", f"{path!r}: config.json cannot be read ({err}); {hint}.") from None
    if not isinstance(config, dict):
        raise ParamError("path", f"{path!r}: config.json is not a JSON object; {hint}.")
    architectures = config.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        raise ParamError(
            "path",
            f"{path!r} is not a sequence classifier (architectures: {', '.join(architectures) or 'none'}); "
            f"a reward model is an *ForSequenceClassification with one label; {hint}.",
        )
    num_labels = len(config["id2label"]) if config.get("id2label") else config.get("num_labels", 2)
    if num_labels != 1:
        raise ParamError("path", f"{path!r} has num_labels={num_labels}; a reward model outputs one scalar (1).")
    meta_file = os.path.join(folder, RM_META)
    meta = json.loads(open(meta_file, encoding="utf-8").read()) if os.path.isfile(meta_file) else {}
    return folder, meta


@REWARDS.register("reward_model")
class RewardModel(Reward):
    """A trained sequence classifier's scalar score of prompt + completion (batched, no grad)."""

    @dataclass(frozen=True)
    class Config:
        path: Annotated[
            str, PathSpec("classifier_folder")
        ]  # folder of a 1-label sequence classifier (rlpost train-rm writes <run>/model)
        batch_size: Annotated[int, Range(ge=1)] = 16  # sequences per forward
        normalize: Literal["none", "batch", "heldout"] = "none"
        # keep the last N tokens; null = the folder's training value (else 512)
        max_length: Annotated[int | None, Range(ge=8, why="tokens")] = None
        conversational: bool = True  # chat-template rendering, used only when the folder does not record it
        dtype: Literal["float32", "bfloat16", "float16"] = "float32"

        def __post_init__(self) -> None:
            if self.batch_size < 1:
                raise ValueError(f"batch_size={self.batch_size} must be at least 1")
            if self.max_length is not None and self.max_length < 8:
                raise ValueError(f"max_length={self.max_length} must be at least 8 tokens")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.folder, meta = check_classifier_folder(cfg.path)
        self.conversational = bool(meta.get("conversational", cfg.conversational))
        self.max_length = cfg.max_length or int(meta.get("max_length", 512))
        if cfg.normalize == "heldout" and not meta.get("score_std"):
            raise ParamError(
                "normalize",
                f"'heldout' needs the held-out score mean/std that rlpost train-rm writes to {RM_META}; "
                f"{cfg.path!r} has none. Use normalize=batch or none.",
            )
        self.mean, self.std = float(meta.get("score_mean", 0.0)), float(meta.get("score_std", 1.0))
        self.features: list[str] = list(meta.get("features") or [])  # columns a regression RM reads
        self._model = None
        self._tokenizer = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_model": None, "_tokenizer": None}

    def load(self):
        """(model, tokenizer), loaded once on the policy's device."""
        if self._model is None:
            from accelerate import PartialState
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.folder, trust_remote_code=False)
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            model = AutoModelForSequenceClassification.from_pretrained(  # no pickle, no remote code
                self.folder, dtype=getattr(torch, self.cfg.dtype), use_safetensors=True, trust_remote_code=False
            )
            model.config.pad_token_id = tokenizer.pad_token_id
            self._model = model.to(PartialState().device).eval().requires_grad_(False)
            self._tokenizer = tokenizer
        return self._model, self._tokenizer

    def scores(self, prompts: list, completions: list, **columns: Any) -> torch.Tensor:
        """Raw classifier scores ``[N]`` (float32, CPU) of each prompt + completion (and its features)."""
        model, tokenizer = self.load()
        missing = [name for name in self.features if name not in columns]
        if missing:
            raise ValueError(
                f"reward 'reward_model': {self.cfg.path!r} was trained with the rows' features {self.features} "
                f"(train-rm context_only=false); the data has no column {missing[0]!r}. Give the data those "
                "columns, or train the reward model with context_only=true."
            )
        rows = [{name: columns[name][i] for name in self.features} for i in range(len(prompts))]
        texts = [
            render_row(tokenizer, p, c, f, self.conversational, bool(self.features))
            for p, c, f in zip(prompts, completions, rows)
        ]
        ids = encode(tokenizer, texts, self.max_length)
        return score_ids(model, ids, tokenizer.pad_token_id, self.cfg.batch_size)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``prompts [N]``, ``completions [N]`` -> rewards ``[N]`` (normalized per ``normalize``)."""
        r = self.scores(prompts, completions, **{k: v for k, v in kwargs.items() if k in self.features})
        if self.cfg.normalize == "batch":
            r = (r - r.mean()) / (r.std(unbiased=False) + 1e-6)
        elif self.cfg.normalize == "heldout":
            r = (r - self.mean) / self.std
        return r.tolist()


__all__ = ["RewardModel", "check_classifier_folder"]
