"""``rlpost merge``: checkpoint interpolation (seed 000 #1), task arithmetic and TIES (seed 000 #21),
LoRA adapters merged into their base, and PRISM's weight-space composition (seed 000 #13: LoRA adapters as
task vectors, the negative policy with a negative weight). Writes a plain safetensors model folder.

    rlpost merge models=[outputs/sft,outputs/rl] alpha=0.3               # (1-0.3)*sft + 0.3*rl
    rlpost merge -m models=[A,B] alpha=0,0.25,0.5,0.75,1                   # one model per job
    rlpost merge method=ties model=hf model.path=BASE models=[A,B,C] density=0.2
    rlpost merge method=lora adapter=outputs/<lora run>                   # base read from the run
    rlpost merge method=task_arithmetic model=smollm2-135m models=[POS_A,POS_B,NEG] weights=[1,1,-0.5]  # PRISM

The math is in ``merge_math.py``. Inputs are model folders or run directories (their
``checkpoints/final``); the base is the ``model`` group (``model=smollm2-135m``, ``model=hf
model.path=...``), or for ``lora`` the adapter run's own model. Names and shapes of every input are
compared from the safetensors headers before any tensor loads (ConfigError, exit 2). The output is
built in a hidden temporary folder next to ``out`` and renamed into place at the end, so a failure
leaves nothing half-written. It holds ``model.safetensors`` (shards + index past
``max_shard_gb``), the config/generation/tokenizer files of the first input (or the base) and
``rlpost_merge.json`` (method, inputs, coefficients), and loads with transformers and
``model=hf model.path=<out>``. Non-float tensors (integer buffers) are copied from the first input.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError
from rlpost.models.loading import LoraSettings, ModelConfig
from rlpost.models.prism import check_adapter_base
from rlpost.models.weights import check_same_layout, is_adapter, is_run_dir, resolve_checkpoint, run_config
from rlpost.tools import merge_math

AUX_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
META_FILE = "rlpost_merge.json"


@dataclass(frozen=True)
class MergeSettings:
    model: ModelConfig | None = None  # the base (task_arithmetic, ties, lora; linear's A when one model is given)
    method: Literal["linear", "task_arithmetic", "ties", "lora"] = "linear"
    models: list[str] = field(default_factory=list)
    checkpoint: str = "final"
    alpha: float = 0.5
    weights: list[float] | None = None
    scale: float = 1.0
    density: float = 0.2
    adapter: str | None = None
    out: str | None = None
    overwrite: bool = False
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    max_shard_gb: float = 5.0


@dataclass(frozen=True)
class Plan:
    """What ``check`` resolved: input folders by config key, the reference for aux files, the base."""

    inputs: list[tuple[str, Path]]
    base: tuple[str, Path] | None
    adapter: Path | None = None
    base_model: ModelConfig | None = None


def base_folder(cfg: ModelConfig) -> Path:
    """A local folder for the model group (converted SmolLM2, tiny random, local path or cached hub id)."""
    from rlpost.models.loading import _hf_offline, model_folder

    folder = model_folder(cfg)
    if os.path.isdir(folder):
        return Path(folder)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(folder, local_files_only=_hf_offline()))


def plan(s: MergeSettings) -> Plan:
    """Resolve and check every input (no tensor loads); ConfigError names the key."""
    if s.method == "lora":
        return _plan_lora(s)
    inputs = [(f"models[{i}]", resolve_checkpoint(p, f"models[{i}]", s.checkpoint)) for i, p in enumerate(s.models)]
    adapters = [(key, folder) for key, folder in inputs if is_adapter(folder)]
    for (key, folder), given in zip(inputs, s.models):
        if (key, folder) not in adapters:
            continue
        if s.method == "linear" or s.model is None:
            raise ConfigError(
                f"{key}={folder} is a LoRA adapter; merge it into its base first (rlpost merge method=lora "
                "adapter=...), or give method=task_arithmetic or ties with the base as model=<choice>."
            )
        check_adapter_base(Path(given).expanduser(), key, s.model)
    base = ("model", base_folder(s.model)) if s.model is not None else None
    if s.method == "linear":
        if len(inputs) == 1 and base is not None:
            inputs = [base, *inputs]  # interpolate from the base (the SFT model) to the one checkpoint
        if len(inputs) != 2:
            raise ConfigError(
                f"method=linear interpolates two checkpoints: models=[A,B] (or one model plus the base model=...); "
                f"got {len(s.models)} in models{' and a base' if base else ''}."
            )
        if not 0.0 <= s.alpha <= 1.0:
            raise ConfigError(f"alpha={s.alpha} must be in [0, 1] (0 = models[0], 1 = models[1]).")
        check_same_layout(inputs[0], inputs[1:])
        return Plan(inputs=inputs, base=None)
    if base is None:
        raise ConfigError(f"method={s.method} needs the base model the task vectors start from: model=<choice>.")
    if not inputs:
        raise ConfigError(f"method={s.method} needs at least one fine-tuned model in models=[...].")
    if s.weights is not None and len(s.weights) != len(inputs):
        raise ConfigError(f"weights has {len(s.weights)} entries but models has {len(inputs)}; give one per model.")
    if s.method == "ties" and not 0.0 < s.density <= 1.0:
        raise ConfigError(f"density={s.density} must be in (0, 1]: the fraction of each task vector kept.")
    check_same_layout(base, [i for i in inputs if i not in adapters])
    assert s.model is not None  # base is not None
    return Plan(inputs=inputs, base=base, base_model=replace(s.model, lora=LoraSettings()))


def _plan_lora(s: MergeSettings) -> Plan:
    if not s.adapter:
        raise ConfigError("method=lora needs adapter=<adapter folder or LoRA run directory>.")
    adapter = resolve_checkpoint(s.adapter, "adapter", s.checkpoint)
    if not is_adapter(adapter):
        raise ConfigError(f"adapter={s.adapter!r}: {adapter} has no adapter_config.json (not a LoRA adapter).")
    model = s.model
    if model is None and is_run_dir(Path(s.adapter).expanduser()):
        from rlpost.core.schema import build_config

        model = build_config(ModelConfig, run_config(Path(s.adapter).expanduser())["model"], "model")
    if model is None:
        raise ConfigError("method=lora needs the base model: model=<choice> (or adapter=<a LoRA run directory>).")
    model = replace(model, lora=LoraSettings())  # the base alone
    return Plan(inputs=[], base=("model", base_folder(model)), adapter=adapter, base_model=model)


def check(s: MergeSettings, overrides: list[str]) -> MergeSettings:
    if s.max_shard_gb <= 0:
        raise ConfigError(f"max_shard_gb={s.max_shard_gb} must be > 0.")
    if s.out is not None and Path(s.out).exists() and any(Path(s.out).iterdir()) and not s.overwrite:
        raise ConfigError(f"out={s.out!r} exists and is not empty; choose another folder or set overwrite=true.")
    plan(s)
    return s


def merge(s: MergeSettings, out: Path) -> Path:
    """Merge as ``s`` says into the folder ``out`` (atomically); returns ``out``."""
    p = plan(s)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        if s.method == "lora":
            _merge_lora(p, tmp, s.dtype)
        else:
            _merge_tensors(s, _adapters_merged(p, tmp), tmp)
        meta = {
            "method": s.method,
            "inputs": {key: str(folder) for key, folder in p.inputs},
            "base": str(p.base[1]) if p.base else None,
            "adapter": str(p.adapter) if p.adapter else None,
            "alpha": s.alpha if s.method == "linear" else None,
            "weights": list(s.weights) if s.weights is not None else None,
            "scale": s.scale if s.method in ("task_arithmetic", "ties") else None,
            "density": s.density if s.method == "ties" else None,
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)  # only reached with overwrite=true or an empty folder (check())
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _adapters_merged(p: Plan, tmp: Path) -> Plan:
    """task_arithmetic / ties over LoRA adapters (PRISM's weight-space composition, rlpost/models/prism.py): each
    adapter input merged into the base first, in ``tmp/.adapters/<i>`` (removed before ``tmp`` is renamed)."""
    inputs = []
    for i, (key, folder) in enumerate(p.inputs):
        if is_adapter(folder):
            merged = tmp / ".adapters" / str(i)
            merged.mkdir(parents=True)
            _merge_lora(replace(p, adapter=folder), merged, None)
            folder = merged
        inputs.append((key, folder))
    return replace(p, inputs=inputs)


def _merge_tensors(s: MergeSettings, p: Plan, tmp: Path) -> None:
    import torch
    from safetensors import safe_open

    from rlpost.models.weights import weight_files

    ref_folder = p.base[1] if p.base else p.inputs[0][1]
    handles: dict[Path, dict[str, Any]] = {}

    def opened(folder: Path):
        if folder not in handles:
            handles[folder] = {}
            for file in weight_files(folder):
                f = safe_open(str(file), framework="pt")
                for name in f.keys():  # noqa: SIM118
                    handles[folder][name] = f
        return handles[folder]

    def tensor(folder: Path, name: str) -> torch.Tensor:
        return opened(folder)[name].get_tensor(name)

    weights = list(s.weights) if s.weights is not None else [1.0] * len(p.inputs)
    dtype = getattr(torch, s.dtype) if s.dtype else None
    merged: dict[str, torch.Tensor] = {}
    for name in opened(ref_folder):
        first = tensor(p.inputs[0][1], name)
        if not first.is_floating_point():
            merged[name] = first
            continue
        models = [tensor(folder, name) for _, folder in p.inputs]
        if s.method == "linear":
            value = merge_math.linear(models[0], models[1], s.alpha)
        else:
            assert p.base is not None  # task_arithmetic / ties: plan() requires base
            base = tensor(p.base[1], name)
            if s.method == "task_arithmetic":
                value = merge_math.task_arithmetic(base, models, weights, s.scale)
            else:
                value = merge_math.ties(base, models, weights, s.scale, s.density)
        merged[name] = value.to(dtype) if dtype is not None else value
    save_weights(merged, tmp, s.max_shard_gb)
    copy_aux([ref_folder, *(f for _, f in p.inputs)], tmp, s.dtype)
    shutil.rmtree(tmp / ".adapters", ignore_errors=True)


def _merge_lora(p: Plan, tmp: Path, dtype: str | None) -> None:
    from peft import PeftModel

    from rlpost.models.loading import load_model, load_tokenizer

    assert p.base is not None and p.base_model is not None and p.adapter is not None  # method=lora: set by _plan_lora()
    base = load_model(p.base_model)
    try:
        model = PeftModel.from_pretrained(base, str(p.adapter)).merge_and_unload()
    except (RuntimeError, ValueError, KeyError) as err:  # adapter made for another architecture
        raise ConfigError(f"adapter={p.adapter} does not fit the base model {p.base[1]}: {err}") from None
    if dtype:
        import torch

        model = model.to(getattr(torch, dtype))
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer_from = p.adapter if (p.adapter / "tokenizer_config.json").is_file() else p.base[1]
    load_tokenizer(ModelConfig(source="hf", path=str(tokenizer_from))).save_pretrained(tmp)


def save_weights(tensors: dict, folder: Path, max_shard_gb: float) -> None:
    """``model.safetensors``, or ``model-0000i-of-0000n.safetensors`` + index past ``max_shard_gb``."""
    from safetensors.torch import save_file

    limit = int(max_shard_gb * 1024**3)
    shards: list[dict] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = t.contiguous()
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, file))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def copy_aux(sources: list[Path], folder: Path, dtype: str | None) -> None:
    """The config and tokenizer files, each from the first source that has it."""
    for name in AUX_FILES:
        source = next((s / name for s in sources if (s / name).is_file()), None)
        if source is not None:
            shutil.copy2(source, folder / name)
    config = folder / "config.json"
    if dtype and config.is_file():
        data = json.loads(config.read_text())
        data["dtype"] = dtype
        data.pop("torch_dtype", None)
        config.write_text(json.dumps(data, indent=2) + "\n")


def run(s: MergeSettings, output_dir: str, overrides: list[str]) -> int:
    out = Path(s.out) if s.out else Path(output_dir) / "model"
    merge(s, out)
    what = {"linear": f"alpha={s.alpha}", "task_arithmetic": f"scale={s.scale}", "lora": "adapter merged"}
    print(f"merged ({s.method}, {what.get(s.method, f'density={s.density} scale={s.scale}')}): {out}")
    print(f"  load it with: rlpost eval model=hf model.path={out}")
    return 0


APP = tool("merge", "merge", MergeSettings, check, run)


def main(args: list[str]) -> int:
    return launch(APP, args)
