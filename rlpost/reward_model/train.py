"""``rlpost train-rm``: a reward model, Bradley-Terry from preference pairs (TRL's RewardTrainer) or a
regression on a scalar valuation (KARMA, seed 004 #3; rlpost/reward_model/valuations.py).

    rlpost train-rm [model=smollm2-135m] [data.train=pairs.jsonl data.heldout=heldout.jsonl] [train.epochs=2]
    rlpost train-rm objective=regression [context_only=true]     # the bundled synthetic karma data

Its own Hydra app on ``conf/train_rm.yaml`` (rlpost/tools/train_rm.py), sharing the ``model`` group
with ``rlpost train``. The model's weights load into ``AutoModelForSequenceClassification`` with
``num_labels=1`` (a fresh linear ``score`` head on the last non-pad token; a causal LM's ``lm_head``
is dropped) and are trained with ``-log sigmoid(r_chosen - r_rejected)`` (TRL 1.16's
``RewardTrainer.compute_loss``).
The run directory gets ``model/`` (safetensors, tokenizer, ``rlpost_reward_model.json``: how to
render inputs and the held-out score mean/std), ``summary.json`` (held-out pairwise accuracy, loss
and margin before and after), ``metrics.jsonl`` and ``config.yaml``.

Choices where the brief was silent:
- Pairs are tokenized here (``pairs.render``/``encode``) and handed to RewardTrainer as
  ``chosen_ids``/``rejected_ids``, so its own EOS/truncation logic never runs and the reward term
  renders completions the same way. The pad token is the EOS when the tokenizer has none.
- Full fine-tuning only (``model.lora.enabled=true`` is refused: the saved folder must load with
  plain transformers); ``train.steps`` (when set) overrides ``train.epochs``.
- The score head is seeded with ``seed`` (set before the model loads, as TRL does).
- ``objective=regression``: rows of (prompt, response, value, features); the scalar is fitted to the
  standardized transformed value by squared error with transformers' ``Trainer`` (a 1-label classifier
  with float labels is its regression loss); ``context_only=true`` hides the features
  (valuations.py). Held-out metrics: mse, pearson, spearman. The folder's metadata records the
  objective, whether the model reads features and which, so the reward term renders its inputs alike.
- ``data.train``/``data.heldout`` null: the objective's bundled files (arithmetic preference pairs;
  synthetic karma valuations).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from rlpost.core.errors import ConfigError
from rlpost.models.loading import ModelConfig
from rlpost.reward_model.pairs import RM_META, Pair, encode, pairwise_metrics, read_pairs, render
from rlpost.reward_model.valuations import Valuation, feature_names, read_valuations

BUNDLED = {  # objective -> (train, heldout) when data.train / data.heldout are null
    "bradley_terry": ("recipes/data/arith_preferences.jsonl", "recipes/data/arith_preferences_heldout.jsonl"),
    "regression": ("recipes/data/karma_valuations.jsonl", "recipes/data/karma_valuations_heldout.jsonl"),
}


@dataclass(frozen=True)
class PreferenceData:
    train: str | None = None  # null: the objective's bundled training file (BUNDLED)
    heldout: str | None = None
    conversational: bool = True
    max_length: int = 256
    target_transform: Literal["signed_log", "none"] = "signed_log"  # regression: the value's transform


@dataclass(frozen=True)
class RMTrain:
    epochs: float = 1.0
    steps: int | None = None
    batch_size: int = 8
    learning_rate: float = 1e-5
    lr_scheduler: str = "linear"
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    center_rewards: float | None = None
    eval_batch_size: int = 32


@dataclass(frozen=True)
class RMSettings:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: PreferenceData = field(default_factory=PreferenceData)
    train: RMTrain = field(default_factory=RMTrain)
    seed: int = 0
    progress: bool = True
    objective: Literal["bradley_terry", "regression"] = "bradley_terry"
    context_only: bool = False  # regression: the model reads the conversation only, not the row's features

    def files(self) -> tuple[str, str]:
        """(train, heldout) paths: the configured ones, else the objective's bundled files."""
        train, heldout = BUNDLED[self.objective]
        return self.data.train or train, self.data.heldout or heldout


def build_settings(cfg: Any) -> RMSettings:
    """Validate the composed train-rm config; no model loads. Raises ConfigError."""
    from rlpost.core.schema import build_config, composed_mapping
    from rlpost.data.sources import resolve_data_path
    from rlpost.models.bundled import smollm2_gguf
    from rlpost.models.loading import _check_hf_path

    settings = build_config(RMSettings, composed_mapping(cfg), "")
    if settings.model.lora.enabled:
        raise ConfigError("train-rm does full fine-tuning; model.lora.enabled=true is not supported here.")
    if settings.context_only and settings.objective != "regression":
        raise ConfigError(
            "context_only=true is for objective=regression (a reward model that does not read the rows' features); "
            "preference pairs have no features."
        )
    rows = "prompt/chosen/rejected" if settings.objective == "bradley_terry" else "prompt/response/value"
    for key, path in zip(("data.train", "data.heldout"), settings.files()):
        if not os.path.isfile(resolve_data_path(path)):
            raise ConfigError(f"{key}={path!r}: no such file (a jsonl of {rows} rows).")
    train = settings.train
    for key, value in (("train.batch_size", train.batch_size), ("train.eval_batch_size", train.eval_batch_size)):
        if value < 1:
            raise ConfigError(f"{key}={value} must be at least 1.")
    if train.steps is not None and train.steps < 1:
        raise ConfigError(f"train.steps={train.steps} must be at least 1 (or null to use train.epochs).")
    if train.steps is None and train.epochs <= 0:
        raise ConfigError(f"train.epochs={train.epochs} must be > 0.")
    if settings.data.max_length < 8:
        raise ConfigError(f"data.max_length={settings.data.max_length} must be at least 8 tokens.")
    if settings.model.source == "hf":
        _check_hf_path(settings.model.path)
    elif settings.model.source == "smollm2":
        smollm2_gguf()
    return settings


def load_pairs(settings: RMSettings) -> tuple[list[Pair], list[Pair]] | tuple[list[Valuation], list[Valuation]]:
    """The (train, heldout) rows of the objective: preference pairs or valuations (file:line errors)."""
    from rlpost.data.sources import resolve_data_path

    train, heldout = (resolve_data_path(p) for p in settings.files())
    if settings.objective == "bradley_terry":
        return read_pairs(train), read_pairs(heldout)
    rows = read_valuations(train), read_valuations(heldout)
    if not settings.context_only:
        names = feature_names(rows[0], train)
        if feature_names(rows[1], heldout) != names:
            raise ConfigError(f"{heldout}: its features differ from the training file's ({names}).")
    return rows


def load_classifier(cfg: ModelConfig):
    """(model, tokenizer): the model config's weights under a 1-label sequence classifier, pad set."""
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    from rlpost.models.loading import _from_pretrained, load_tokenizer

    tokenizer = load_tokenizer(cfg)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "score.weight newly initialized" is the point here
    try:
        model = _from_pretrained(
            AutoModelForSequenceClassification.from_pretrained, cfg, num_labels=1, dtype=getattr(torch, cfg.dtype)
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def train_rm(
    cfg: Any, run_dir: str | os.PathLike, overrides: list[str] | None = None, settings: RMSettings | None = None
) -> dict[str, Any]:
    """Train one reward model described by the composed config; returns the summary. ``settings`` is
    ``build_settings(cfg)`` as the launch validated it (rlpost/tools/train_rm.py); built here without it."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainingArguments, set_seed
    from trl import RewardConfig, RewardTrainer

    from rlpost.reward_model.regression import ValuationTask
    from rlpost.runs.callbacks import MetricsFileCallback, RichProgressCallback
    from rlpost.runs.rundir import RunDirectory

    if settings is None:
        settings = build_settings(cfg)
    train_rows, heldout = load_pairs(settings)  # file:line errors before anything is written
    rundir = RunDirectory(run_dir)
    rundir.write_config(cfg, overrides or [])
    set_seed(settings.seed)
    model, tokenizer = load_classifier(settings.model)
    data, train = settings.data, settings.train
    common = dict(  # TrainingArguments shared by both objectives
        output_dir=str(rundir.checkpoints),
        per_device_train_batch_size=train.batch_size,
        num_train_epochs=train.epochs,
        max_steps=train.steps if train.steps is not None else -1,
        learning_rate=train.learning_rate,
        lr_scheduler_type=train.lr_scheduler,
        warmup_steps=train.warmup_ratio,  # a float < 1 is a ratio of the total steps (transformers 5)
        weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=settings.seed,
        disable_tqdm=True,
        bf16=False,
    )
    callbacks = [MetricsFileCallback(rundir)] + ([RichProgressCallback()] if settings.progress else [])
    meta: dict[str, Any] = {"objective": settings.objective}
    if settings.objective == "regression":
        task = ValuationTask(settings, tokenizer, cast(list[Valuation], train_rows), cast(list[Valuation], heldout))
        meta.update(task.meta())

        def metrics() -> dict[str, float]:
            return task.metrics(model)

        before = metrics()
        trainer = task.trainer(model, TrainingArguments(**common), callbacks)
    else:
        pairs, heldout_pairs = cast(list[Pair], train_rows), cast(list[Pair], heldout)

        def metrics() -> dict[str, float]:
            return pairwise_metrics(
                model, tokenizer, heldout_pairs, data.conversational, data.max_length, train.eval_batch_size
            )

        before = metrics()
        texts = [render(tokenizer, p.prompt, c, data.conversational) for p in pairs for c in (p.chosen, p.rejected)]
        ids = encode(tokenizer, texts, data.max_length)
        dataset = Dataset.from_dict({"chosen_ids": ids[0::2], "rejected_ids": ids[1::2]})
        args = RewardConfig(
            **common,
            center_rewards_coefficient=train.center_rewards,
            max_length=None,  # encode() already kept the last data.max_length tokens
        )
        trainer = RewardTrainer(
            model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=callbacks
        )
    trainer.remove_callback(PrinterCallback)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    model = trainer.model
    after = metrics()

    folder = rundir.path / "model"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    meta.update(
        conversational=data.conversational,
        max_length=data.max_length,
        score_mean=after["score_mean"],
        score_std=after["score_std"],
    )
    (folder / RM_META).write_text(json.dumps(meta, indent=2) + "\n")
    summary = {
        "run_dir": str(rundir.path),
        "model_dir": str(folder),
        "model": settings.model.display_name,
        "objective": settings.objective,
        "train_pairs" if settings.objective == "bradley_terry" else "train_rows": len(train_rows),
        "steps": trainer.state.global_step,
        "train_seconds": round(seconds, 2),
        "seconds_per_step": round(seconds / max(trainer.state.global_step, 1), 3),
        "before": before,
        "after": after,
    }
    rundir.write_summary(summary)
    return summary
