"""The rubric writer of dynamic_rubric: a text generator that writes rubric items for a candidate set.

The judge layer (rlpost/judges/) turns prompts into scores; writing rubric items needs free text,
so the writer is its own small generator with two backends:

- ``local``: any rlpost model config (SmolLM2-135M-Instruct by default), loaded on first use, greedy
  decoding of ``max_new_tokens`` after the chat template's assistant turn; a separate copy from the
  policy (a writer that moved with the policy would grade its own drift).
- ``openai``: an OpenAI-compatible ``/chat/completions`` endpoint (``base_url``, ``model``, key from
  ``api_key_env``), temperature ``temperature``, ``timeout_s`` per request, no retries (a failed
  write falls back to the reward's ``default_items``).

``write(prompts [M], prefix) -> texts [M]`` with ``None`` for a prompt whose generation failed; a
``prefix`` opens the local writer's answer (it is part of the returned text).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.request
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.models.loading import ModelConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterConfig:
    backend: Literal["local", "openai"] = "local"  # local model | OpenAI-compatible endpoint
    model: ModelConfig = field(default_factory=ModelConfig)  # local: the rlpost model config (default SmolLM2)
    max_new_tokens: Annotated[int, Range(ge=1)] = 128  # length of a written rubric
    device: Literal["auto", "cpu", "cuda"] = "auto"  # local: where the writer runs
    base_url: str = "http://localhost:8000/v1"  # openai: endpoint root
    endpoint_model: str = "gpt-4o-mini"  # openai: the model name the endpoint serves
    api_key_env: str | None = None  # openai: env var holding the key (null: no key)
    temperature: Annotated[float, Range(ge=0)] = 0.0  # openai: sampling temperature
    timeout_s: Annotated[float, Range(gt=0)] = 60.0  # openai: per request

    def __post_init__(self):
        if self.max_new_tokens < 1 or self.timeout_s <= 0:
            raise ValueError("max_new_tokens must be >= 1 and timeout_s > 0")
        if self.backend == "openai" and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")


class RubricWriter:
    """Generates rubric text for prompts (module docstring)."""

    def __init__(self, cfg: WriterConfig):
        self.cfg = cfg
        self.model: Any = None  # loaded on first use (a transformers model / tokenizer); the co-evolving
        self.tokenizer: Any = None  # writer (rubric_coevolution.py) wraps the model with its LoRA adapters
        self._lock = threading.Lock()
        if cfg.backend == "openai" and cfg.api_key_env and not os.environ.get(cfg.api_key_env):
            raise ConfigError(f"writer api_key_env={cfg.api_key_env!r}: the environment variable is not set")

    def __getstate__(self):  # pickling (TRL's async worker) drops the loaded model and the lock
        return {**self.__dict__, "model": None, "tokenizer": None, "_lock": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def write(self, prompts: list[str], prefix: str = "") -> list[str | None]:
        if self.cfg.backend == "openai":
            return [self._post(p) for p in prompts]
        with self._lock:
            return self._generate(prompts, prefix)

    def _post(self, prompt: str) -> str | None:
        cfg = self.cfg
        body = {
            "model": cfg.endpoint_model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": cfg.max_new_tokens,
            "temperature": cfg.temperature,
        }
        headers = {"Content-Type": "application/json"}
        if cfg.api_key_env:
            headers["Authorization"] = f"Bearer {os.environ.get(cfg.api_key_env, '')}"
        url = cfg.base_url.rstrip("/") + "/chat/completions"
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
                return str(json.loads(response.read().decode("utf-8"))["choices"][0]["message"]["content"])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
            logger.warning("rubric writer %s failed: %s", url, err)
            return None

    def load(self) -> tuple[Any, Any]:
        """The local writer's (model, tokenizer), loaded on first use (left padding, no grad)."""
        import torch

        from rlpost.models.loading import load_model, load_tokenizer

        if self.model is None:
            device = self.cfg.device
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            self.tokenizer = load_tokenizer(self.cfg.model)
            self.tokenizer.padding_side = "left"
            self.model = load_model(self.cfg.model).to(device).eval().requires_grad_(False)
        return self.model, self.tokenizer

    def chat_texts(self, prompts: list[str], prefix: str = "") -> list[str]:
        """Each prompt as a user turn, the assistant turn opened and started with ``prefix``."""
        tok = self.load()[1]
        return [
            tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            + prefix
            for p in prompts
        ]

    def _generate(self, prompts: list[str], prefix: str = "") -> list[str | None]:
        import torch

        model, tok = self.load()
        texts = self.chat_texts(prompts, prefix)
        inputs = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        with torch.no_grad():
            ids = model.generate(
                **inputs, max_new_tokens=self.cfg.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id
            )
        return [prefix + t for t in tok.batch_decode(ids[:, inputs["input_ids"].size(1) :], skip_special_tokens=True)]


def build_writer(node: Any) -> RubricWriter:
    from rlpost.core.schema import build_config, check_paths, to_container

    cfg = build_config(WriterConfig, dict(to_container(node) or {}), "writer")
    check_paths(cfg, "writer")  # a local writer's model.path
    return RubricWriter(cfg)
