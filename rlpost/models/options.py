"""A second model named by its ``conf/model`` option (plus field overrides): peers, teachers.

``named_model_config("tiny-random", {"tiny_hidden": 32}, key, overrides_key)`` reads
``conf/model/tiny-random.yaml``, applies the overrides and validates the result as a
``ModelConfig``; an unknown option or field is a ``ConfigError`` naming the valid ones, before
anything loads. ``load_frozen`` loads it next to a trainer's policy (given the policy's tokenizer,
device and temperature), checks that it shares the policy's tokenizer (its token ids must mean the
same), and adds TRL's fused log-prob head.
"""

from __future__ import annotations

import threading
from typing import Any

from rlpost.core.confdir import CONF_DIR
from rlpost.core.errors import ConfigError

MODEL_CONF = CONF_DIR / "model"
_SHARED: dict[str, Any] = {}  # frozen_generator: one (model, tokenizer) per model config and process
_SHARED_LOCK = threading.Lock()


def named_model_config(name: str, overrides: dict[str, Any] | None, where: str, overrides_where: str):
    """The ModelConfig of ``conf/model/<name>.yaml`` with ``overrides`` applied (``where*``: their config keys, for errors)."""
    from omegaconf import OmegaConf

    from rlpost.core.schema import build_config, check_paths
    from rlpost.models.loading import ModelConfig

    choices = sorted(p.stem for p in MODEL_CONF.glob("*.yaml"))
    if name not in choices:
        raise ConfigError(f"{where}={name!r} is not a model config; choices: {', '.join(choices)}.")
    node = {**OmegaConf.to_container(OmegaConf.load(MODEL_CONF / f"{name}.yaml")), **(overrides or {})}
    config = build_config(ModelConfig, node, overrides_where)
    check_paths(config, overrides_where)  # a local folder exists and holds a model, before any model loads
    return config


def load_frozen(config, *, tokenizer: Any, device: Any, temperature: float):
    """Load ``config`` on ``device``, frozen, with TRL's fused log-prob head at ``temperature`` (the policy's
    sampling temperature); ``tokenizer`` is the policy's, which the model must share."""
    from trl.trainer.utils import add_fused_lm_head

    from rlpost.models.loading import load_model, load_tokenizer

    if load_tokenizer(config).get_vocab() != tokenizer.get_vocab():
        raise ValueError(
            f"model {config.display_name} has a different tokenizer from the policy: "
            "it must score the policy's token ids"
        )
    model = load_model(config).to(device).eval().requires_grad_(False)
    add_fused_lm_head(model, temperature=temperature, outputs=("log_probs", "entropy"))
    return model


def frozen_generator(name: str, overrides: dict[str, Any] | None, where: str, overrides_where: str) -> tuple[Any, Any]:
    """A frozen model that generates for an environment (a worker, a simulated user) and its tokenizer, loaded
    once per process and shared by every episode; on the GPU when there is one."""
    import torch

    from rlpost.models.loading import load_model, load_tokenizer

    key = f"{name}:{sorted((overrides or {}).items())}"
    with _SHARED_LOCK:
        if key not in _SHARED:
            config = named_model_config(name, overrides, where, overrides_where)
            device = "cuda" if torch.cuda.is_available() else "cpu"
            _SHARED[key] = (load_model(config).to(device).eval().requires_grad_(False), load_tokenizer(config))
        return _SHARED[key]


def generate_reply(model: Any, tokenizer: Any, messages: list[dict[str, str]], max_new_tokens: int) -> str:
    """One greedy chat reply of a frozen model to ``messages``."""
    import torch

    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ids = {k: v.to(model.device) for k, v in ids.items()}
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids["input_ids"].size(1) :], skip_special_tokens=True)


def generate_replies(
    model: Any, tokenizer: Any, conversations: list[list[dict[str, str]]], max_new_tokens: int
) -> list[str]:
    """Greedy chat replies of a frozen model to several conversations [N] in one left-padded batch -> [N] texts."""
    import torch

    texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    side, tokenizer.padding_side = tokenizer.padding_side, "left"  # new tokens follow every prompt directly
    try:
        ids = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    finally:
        tokenizer.padding_side = side
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.batch_decode(out[:, ids["input_ids"].size(1) :], skip_special_tokens=True)
