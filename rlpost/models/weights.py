"""Where a model's weights are: model folders, run directories, LoRA adapters, safetensors headers.

A *run directory* (``rlpost train``'s output: ``config.yaml`` + ``checkpoints/``) stands for one of
its checkpoints (``final`` by default); a *model folder* holds ``*.safetensors`` (one file or
shards with ``model.safetensors.index.json``); an *adapter folder* holds ``adapter_config.json``.
Headers are read without loading any tensor, so shape/key checks cost milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlpost.core.errors import ConfigError

ADAPTER_CONFIG = "adapter_config.json"


def is_run_dir(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "checkpoints").is_dir()


def is_adapter(path: Path) -> bool:
    return (path / ADAPTER_CONFIG).is_file()


def resolve_checkpoint(path: str | Path, key: str, checkpoint: str = "final") -> Path:
    """A model or adapter folder for ``path``: itself, or a run directory's ``checkpoints/<checkpoint>``."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"{key}={str(path)!r}: no such folder (a model folder or an rlpost run directory).")
    if is_run_dir(folder):
        chosen = folder / "checkpoints" / checkpoint
        if not chosen.is_dir():
            have = sorted(p.name for p in (folder / "checkpoints").iterdir() if p.is_dir())
            raise ConfigError(
                f"{key}={str(path)!r} is a run directory without checkpoints/{checkpoint} "
                f"(it has: {', '.join(have) or 'none'}; did the run finish?)."
            )
        folder = chosen
    if not is_adapter(folder) and not weight_files(folder):
        raise ConfigError(f"{key}={str(path)!r}: {folder} holds no *.safetensors weights and no {ADAPTER_CONFIG}.")
    return folder


def run_config(run_dir: Path) -> dict[str, Any]:
    """The resolved config a run directory was trained with."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True)


def weight_files(folder: Path) -> list[Path]:
    """The model's safetensors files (adapter weights excluded), in shard order."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / s for s in shards]
    return sorted(p for p in folder.glob("*.safetensors") if not p.name.startswith("adapter_"))


def header(folder: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """``{tensor name: (shape, dtype)}`` from the safetensors headers, no tensor loaded."""
    from safetensors import safe_open

    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for file in weight_files(folder):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                piece = f.get_slice(name)
                out[name] = (tuple(piece.get_shape()), piece.get_dtype())
    return out


def check_same_layout(reference: tuple[str, Path], others: list[tuple[str, Path]]) -> dict[str, tuple]:
    """Every model must have the reference's tensor names and shapes; ConfigError names the first difference."""
    ref_key, ref_folder = reference
    ref = header(ref_folder)
    for key, folder in others:
        other = header(folder)
        missing = sorted(set(ref) - set(other))
        extra = sorted(set(other) - set(ref))
        if missing or extra:
            name, where = (missing[0], f"missing from {key}") if missing else (extra[0], f"only in {key}")
            raise ConfigError(
                f"{key} ({folder}) does not match {ref_key} ({ref_folder}): {len(missing)} tensor(s) missing and "
                f"{len(extra)} extra, e.g. {name!r} is {where}. Merging needs the same architecture."
            )
        for name, (shape, _) in ref.items():
            if other[name][0] != shape:
                raise ConfigError(
                    f"{key} ({folder}) does not match {ref_key} ({ref_folder}): tensor {name!r} has shape "
                    f"{list(other[name][0])} there and {list(shape)} in {ref_key}. Merging needs the same architecture."
                )
    return ref
