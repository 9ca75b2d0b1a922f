"""``train-rm objective=regression``: the reward model fitted to a scalar valuation (KARMA, seed 004 #3).

``ValuationTask`` holds what the regression needs beyond the shared trainer loop (rlpost/reward_model/
train.py): the rendering of each row (with or without its features, valuations.py), the standardized
targets, the held-out metrics and the folder metadata the ``reward_model`` term reads back.

The loss is transformers' own for a 1-label sequence classifier with float labels
(``problem_type="regression"``): ``mean((s - t)^2)`` over the batch, ``s`` the classifier's scalar and
``t = (f(v) - mean) / std`` the standardized transformed value (mean and std of the training rows).
"""

from __future__ import annotations

from typing import Any

import torch

from rlpost.reward_model.pairs import encode, render, score_ids
from rlpost.reward_model.valuations import Valuation, regression_metrics, transform_target, with_features


def render_row(tokenizer, prompt: Any, response: Any, features: dict, conversational: bool, use_features: bool) -> str:
    """The text the regression reward model scores for one (prompt, response) and its features."""
    if use_features:
        prompt = with_features(prompt, features, conversational)
    return render(tokenizer, prompt, response, conversational)


class RightPadding:
    """Batches of ``{input_ids, labels}`` -> right-padded ``input_ids``/``attention_mask [B, W]`` and float
    ``labels [B]``: the layout ``score_ids`` scores with, so training and scoring read the same token."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row["input_ids"])] = torch.tensor(row["input_ids"], dtype=torch.long)
            mask[i, : len(row["input_ids"])] = 1
        labels = torch.tensor([float(r["labels"]) for r in rows], dtype=torch.float32)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class ValuationTask:
    """Targets, inputs and metrics of one regression run."""

    def __init__(self, settings: Any, tokenizer, train_rows: list[Valuation], heldout: list[Valuation]):
        self.settings, self.tokenizer = settings, tokenizer
        self.train_rows, self.heldout = train_rows, heldout
        self.use_features = not settings.context_only
        transformed = transform_target(torch.tensor([r.value for r in train_rows]), settings.data.target_transform)
        self.mean = float(transformed.mean())
        self.std = float(transformed.std()) if len(train_rows) > 1 and float(transformed.std()) > 0 else 1.0

    def targets(self, rows: list[Valuation]) -> torch.Tensor:
        """Standardized transformed values ``[N]`` (training mean and std)."""
        values = torch.tensor([r.value for r in rows], dtype=torch.float32)
        return (transform_target(values, self.settings.data.target_transform) - self.mean) / self.std

    def ids(self, rows: list[Valuation]) -> list[list[int]]:
        data = self.settings.data
        texts = [
            render_row(self.tokenizer, r.prompt, r.response, r.features, data.conversational, self.use_features)
            for r in rows
        ]
        return encode(self.tokenizer, texts, data.max_length)

    def metrics(self, model) -> dict[str, float]:
        """Held-out mse, pearson and spearman of the model's scalar against the standardized target."""
        was_training = model.training
        model.eval()
        batch = self.settings.train.eval_batch_size
        scores = score_ids(model, self.ids(self.heldout), self.tokenizer.pad_token_id, batch)
        model.train(was_training)
        return regression_metrics(scores, self.targets(self.heldout))

    def trainer(self, model, args, callbacks: list):
        """transformers' ``Trainer`` on (input_ids, labels): its squared-error loss for float labels."""
        from datasets import Dataset
        from transformers import Trainer

        model.config.problem_type = "regression"
        rows = {"input_ids": self.ids(self.train_rows), "labels": self.targets(self.train_rows).tolist()}
        return Trainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_dict(rows),
            data_collator=RightPadding(self.tokenizer.pad_token_id),
            processing_class=self.tokenizer,
            callbacks=callbacks,
        )

    def meta(self) -> dict[str, Any]:
        """What the reward term needs to render rows as in training (rlpost/rewards/reward_model.py)."""
        features = sorted(self.train_rows[0].features) if self.use_features else []
        return {
            "context_only": self.settings.context_only,
            "features": features,
            "target_transform": self.settings.data.target_transform,
            "target_mean": self.mean,
            "target_std": self.std,
        }
