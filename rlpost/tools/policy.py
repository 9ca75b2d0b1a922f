"""What eval and diagnose share: a policy (model config, run checkpoint or base + LoRA adapter), a data
split and the reward terms, validated before any model loads, then loaded once."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from rlpost.core.config import HardwareConfig
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.data.sources import DataConfig
from rlpost.models.loading import LoraSettings, ModelConfig


@dataclass(frozen=True)
class PolicySettings:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=lambda: DataConfig(task="basic_arithmetic"))
    reward: dict[str, Any] = field(default_factory=dict)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    seed: int = 0
    run: str | None = None
    checkpoint: str = "final"
    adapter: str | None = None
    split: Literal["eval", "train"] = "eval"
    max_new_tokens: int = 32
    batch_size: int = 50
    temperature: float = 1.0
    top_p: float = 1.0
    correct_term: str | None = "auto"  # the reward term that decides correctness (rlpost/scoring/correctness.py)
    correct_threshold: Annotated[float, Range()] = 1.0  # correct when that term scores at least this
    out: str | None = None
    progress: bool = True


def check_policy(s: PolicySettings, size: int | None, size_key: str):
    """Cheap checks shared by eval and diagnose (``size`` None = the whole split); returns the built
    reward parts and the split's dataset."""
    import torch

    from rlpost.build import build_reward
    from rlpost.data.sources import load_datasets
    from rlpost.models.bundled import smollm2_gguf
    from rlpost.models.loading import _check_hf_path
    from rlpost.models.weights import is_adapter, resolve_checkpoint
    from rlpost.transforms.base import build_transform

    reward = build_reward(s.reward)
    if s.model.source == "hf" and s.model.path:
        _check_hf_path(s.model.path)
    elif s.model.source == "smollm2":
        smollm2_gguf()
    if s.adapter is not None and not is_adapter(resolve_checkpoint(s.adapter, "adapter", s.checkpoint)):
        raise ConfigError(f"adapter={s.adapter!r} has no adapter_config.json (not a LoRA adapter folder).")
    if s.hardware.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"hardware={s.hardware.name} asks for a CUDA GPU but none is visible; use hardware=cpu.")
    for key, value in (("max_new_tokens", s.max_new_tokens), ("batch_size", s.batch_size), (size_key, size or 1)):
        if value < 1:
            raise ConfigError(f"{key}={value} must be at least 1.")
    if s.temperature <= 0:
        raise ConfigError(f"temperature={s.temperature} must be > 0 (greedy decoding is greedy=true).")
    train, evals = load_datasets(s.data, build_transform(s.data.transform, "data.transform"))
    dataset = evals if s.split == "eval" else train
    if size is not None and len(dataset) < size:
        where = "data.eval_size" if s.split == "eval" else "data.train_size"
        raise ConfigError(
            f"{size_key}={size} but split={s.split} has {len(dataset)} rows; raise {where} or lower {size_key}."
        )
    return reward, dataset


def policy_correctness(s: PolicySettings, reward, required_by: str | None = None):
    """The correctness criterion of ``s`` over the built ``reward`` (None: no accuracy); ``required_by`` names
    what cannot work without one (a ConfigError then, before any model loads)."""
    from rlpost.scoring.correctness import find_correctness, no_accuracy_reason, verifiable_terms

    correct = find_correctness(
        verifiable_terms(reward.funcs), reward.names, s.correct_term, s.correct_threshold, key=""
    )
    if correct is None and required_by is not None:
        raise ConfigError(
            f"{required_by} needs a correctness criterion, but {no_accuracy_reason(reward.names)}; name the term "
            "that checks correctness with correct_term=<term>."
        )
    return correct


def load_policy(s: PolicySettings):
    """(model on the hardware's device in eval mode, tokenizer); a LoRA adapter is merged into its base."""
    from rlpost.models.loading import load_model, load_tokenizer

    base = replace(s.model, lora=LoraSettings())
    model = load_model(base)
    tokenizer = load_tokenizer(base)
    if s.model.path:  # a UG-TTT checkpoint: the frozen base plus its adapters, evaluated as their mean
        from rlpost.models.lora_ensemble import merge_saved_ensemble

        merge_saved_ensemble(model, s.model.path)
    if s.adapter is not None:
        from peft import PeftModel

        from rlpost.models.weights import resolve_checkpoint

        model = PeftModel.from_pretrained(model, str(resolve_checkpoint(s.adapter, "adapter", s.checkpoint)))
        model = model.merge_and_unload()
    return model.to(s.hardware.device).eval(), tokenizer


def describe(s: PolicySettings) -> dict[str, Any]:
    """Provenance written next to the numbers."""
    data = s.data.task if s.data.source == "reasoning_gym" else s.data.path
    return {
        "model": s.model.display_name,
        "model_path": s.model.path,
        "adapter": s.adapter,
        "run": str(Path(s.run).resolve()) if s.run else None,
        "data": f"{s.data.source}:{data}",
        "split": s.split,
        "seed": s.seed,
    }
