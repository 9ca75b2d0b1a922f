"""``local`` judge: any rlpost model config (SmolLM2-135M-Instruct by default), run in this process,
batched, as a yes/no or 1-10 scorer.

- ``yes_no``: one forward pass over the chat-templated prompt (with the assistant turn opened);
  at the last position, ``sigmoid(logit(Yes) - logit(No))`` (base.py). "Yes" and "No" are the
  first tokens of ``tokenizer.encode("Yes")`` / ``("No")`` without special tokens (SmolLM2: 10539
  and 5230, single tokens; the assistant turn starts on a fresh line, so no leading space).
- ``scale``: generation of ``max_new_tokens`` and the first integer 1..10 of the reply; anything else
  is a malformed verdict and takes ``on_failure``. Greedy by default; ``temperature > 0`` samples the
  reply (a stochastic auto-rater, the noisy multi-tier scores ODRPO is for, seed 004 #25): the same
  prompt may then get another score on each call, so a sampled judge keeps no disk cache.

Choices where nothing dictated one: the model is loaded on first use (building the run loads
nothing), in eval mode, on ``device`` (``auto``: CUDA when visible, else CPU), with no gradients and
left padding; it is a separate copy from the policy (a judge that moved with the policy would
grade its own drift). A lock serialises calls from several threads. No disk cache by default (the
model is deterministic and local); ``cache: true`` turns it on, keyed by the model folder.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rlpost.core.schema import Range
from rlpost.judges.base import JUDGES, DiskCache, Judge, check_common, default_cache_path, parse_scale
from rlpost.models.loading import ModelConfig


@JUDGES.register("local")
class LocalJudge(Judge):
    """A local causal LM (any rlpost model config) as a batched yes/no or 1-10 judge."""

    name = "local"

    @dataclass(frozen=True)
    class Config:
        model: ModelConfig = field(default_factory=ModelConfig)  # rlpost model config (default SmolLM2)
        mode: Literal["yes_no", "scale"] = "yes_no"  # verdict format (judges/base.py)
        on_failure: Literal["skip", "zero", "abort"] = "skip"  # outcome of a prompt that failed
        batch_size: Annotated[int, Range(ge=1)] = 8  # judge prompts per forward pass
        sort_by_length: bool = True  # batch prompts of similar length together (less padding), order restored
        max_new_tokens: Annotated[int, Range(ge=1)] = 4  # reply length in scale mode
        temperature: Annotated[float, Range(ge=0)] = 0.0  # scale mode: 0 = greedy reply, > 0 = sampled (a noisy rater)
        device: Literal["auto", "cpu", "cuda"] = "auto"  # where the judge model runs
        cache: bool = False  # keep scores on disk
        cache_path: str | None = None  # cache folder (null: $RLPOST_CACHE/judge)

        def __post_init__(self):
            check_common(self)
            if self.batch_size < 1 or self.max_new_tokens < 1:
                raise ValueError("batch_size and max_new_tokens must be >= 1")
            if self.temperature > 0 and self.mode != "scale":
                raise ValueError("temperature > 0 samples a scale reply; mode=yes_no reads logits (set mode: scale)")
            if self.temperature > 0 and self.cache:
                raise ValueError("a sampled judge (temperature > 0) cannot keep a disk cache: set cache: false")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self._model: Any = None  # loaded on first use (a transformers model / tokenizer)
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        if cfg.cache:
            self.cache = DiskCache(cfg.cache_path or default_cache_path(), f"local|{cfg.model}")

    def __getstate__(self):  # pickling (TRL's async worker) drops the loaded model and the lock
        state = dict(self.__dict__)
        state.update(_model=None, _tokenizer=None, _lock=None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def load(self) -> None:
        import torch

        from rlpost.models.loading import load_model, load_tokenizer

        if self._model is not None:
            return
        device = self.cfg.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        tokenizer = load_tokenizer(self.cfg.model)
        tokenizer.padding_side = "left"
        self.yes_id = tokenizer.encode("Yes", add_special_tokens=False)[0]
        self.no_id = tokenizer.encode("No", add_special_tokens=False)[0]
        self._model = load_model(self.cfg.model).to(device).eval().requires_grad_(False)
        self._tokenizer = tokenizer

    def _judge(self, prompts: list[str]) -> list[float | Exception]:
        with self._lock:
            self.load()
            order = list(range(len(prompts)))
            if self.cfg.sort_by_length:  # characters track tokens closely enough to bucket by
                order.sort(key=lambda i: len(prompts[i]))
            out: list[float | Exception] = [0.0] * len(prompts)
            for start in range(0, len(prompts), self.cfg.batch_size):
                chunk = order[start : start + self.cfg.batch_size]
                for i, score in zip(chunk, self._batch([prompts[i] for i in chunk])):
                    out[i] = score
            return out

    def _encode(self, prompts: list[str]) -> Any:
        tok = self._tokenizer
        texts = [
            tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts
        ]
        return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self._model.device)

    def _batch(self, prompts: list[str]) -> list[float | Exception]:
        """Judge prompts [b] -> scores [b] in [0, 1] (or the reason a verdict was malformed)."""
        import torch

        inputs = self._encode(prompts)
        with torch.no_grad():
            if self.mode == "yes_no":
                # [b, V]: the last position only (left padding: it predicts the verdict), not [b, S, V]
                logits = self._model(**inputs, logits_to_keep=1).logits[:, -1, :].float()
                margin = logits[:, self.yes_id] - logits[:, self.no_id]  # [b]
                return torch.sigmoid(margin).tolist()
            sampling = {"do_sample": True, "temperature": self.cfg.temperature, "top_k": 0, "top_p": 1.0}
            ids = self._model.generate(
                **inputs,
                max_new_tokens=self.cfg.max_new_tokens,
                pad_token_id=self._tokenizer.pad_token_id,
                **(sampling if self.cfg.temperature > 0 else {"do_sample": False}),
            )
        replies = self._tokenizer.batch_decode(ids[:, inputs["input_ids"].size(1) :], skip_special_tokens=True)
        scores: list[float | Exception] = []
        for reply in replies:
            score = parse_scale(reply)
            scores.append(ValueError(f"malformed scale verdict {reply[:40]!r}") if score is None else score)
        return scores
