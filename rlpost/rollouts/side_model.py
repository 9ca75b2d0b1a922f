"""A frozen side model (any rlpost model config) that writes texts for rollout strategies: the draft
model of ``draft_injection`` (seed 004 #19).

Choices: loaded on first use (building the run loads nothing), in eval mode, without gradients, on
the policy's device; a chat prompt goes through the side model's own chat template with the
assistant turn opened, a string prompt is used as is; left padding, ``batch_size`` prompts per
``generate``; sampling at ``temperature`` (0 = greedy). It is a separate copy from the policy and
never moves with it.
"""

from __future__ import annotations

from typing import Any

import torch

from rlpost.models.loading import ModelConfig


class SideModel:
    """Generates one text per prompt with a frozen model: prompts [M] -> texts [M]."""

    def __init__(self, cfg: ModelConfig, max_new_tokens: int, temperature: float, batch_size: int = 8):
        self.cfg, self.max_new_tokens, self.temperature, self.batch_size = cfg, max_new_tokens, temperature, batch_size
        self._model: Any = None  # loaded on first use (a transformers model / tokenizer)
        self._tokenizer: Any = None

    def __getstate__(self):  # pickling drops the loaded model
        return {**self.__dict__, "_model": None, "_tokenizer": None}

    def load(self, device: Any) -> None:
        if self._model is not None:
            return
        from rlpost.models.loading import load_model, load_tokenizer

        self._tokenizer = load_tokenizer(self.cfg)
        self._tokenizer.padding_side = "left"
        self._model = load_model(self.cfg).to(device).eval().requires_grad_(False)

    def _text(self, prompt: Any) -> str:
        if isinstance(prompt, list):
            return self._tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return str(prompt)

    @torch.no_grad()
    def generate(self, prompts: list, device: Any = "cpu") -> list[str]:
        self.load(device)
        tok, out = self._tokenizer, []
        for start in range(0, len(prompts), self.batch_size):
            texts = [self._text(p) for p in prompts[start : start + self.batch_size]]
            inputs = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self._model.device)
            sample = self.temperature > 0
            ids = self._model.generate(
                **inputs,
                max_new_tokens=self.max_new_tokens,
                do_sample=sample,
                temperature=self.temperature if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=tok.pad_token_id,
            )
            out += tok.batch_decode(ids[:, inputs["input_ids"].size(1) :], skip_special_tokens=True)
        return out
