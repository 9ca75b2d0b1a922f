"""Atomic checkpoints and what ``resume=`` continues.

Writing: the trainer saves a checkpoint into ``<run>/checkpoints/.tmp-checkpoint-N/checkpoint-N``
(model, optimizer, scheduler, RNG states, trainer state with the data position, rlpost component
state) and only then renames it to ``<run>/checkpoints/checkpoint-N``. A run killed while saving
leaves a ``.tmp-`` folder that no reader picks up (TRL/transformers match ``checkpoint-<digits>``
only) and that the next launch deletes. A checkpoint counts as complete when it holds
``trainer_state.json`` and model weights.

Resuming (``resume=``; the CLI resolves it before Hydra makes a run directory):
- ``null``: a fresh run.
- ``auto``: the latest earlier run directory under ``outputs/`` (or the run directory given with
  ``hydra.run.dir=``) that holds a complete checkpoint and whose saved ``config.yaml`` equals this
  launch's composed config (``resume`` itself ignored); the run continues in that directory. When
  there is none, the run starts fresh, so a requeued SLURM job can use one command line for its
  first launch and every restart. Choice: a run with other settings is never continued silently.
- a run directory (holding ``checkpoints/``): its latest complete checkpoint, continued in place.
- a checkpoint folder: that checkpoint; in its run directory when it lies in ``<run>/checkpoints/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from rlpost.core.errors import ConfigError, RunStopped

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
STAGING_PREFIX = ".tmp-"
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin")
IGNORED_KEYS = ("resume",)  # config keys that may differ between the launches of one run


class CheckpointWriteError(RunStopped):
    """A checkpoint (or the final model) could not be written (disk full, quota, read-only folder,
    the run directory removed); names the last complete checkpoint, which is left intact."""

    def __init__(self, name: int | str, root: str | os.PathLike, err: OSError):
        name = f"checkpoint-{name}" if isinstance(name, int) else name
        last = latest_checkpoint(Path(root)) if Path(root).is_dir() else None
        kept = f"the last complete checkpoint is {last}" if last else "no earlier checkpoint exists"
        super().__init__(
            f"{name} could not be written to {root}: {err.strerror or err} ({type(err).__name__}); "
            f"{kept}. Free space (or move hydra.run.dir) and rerun with resume=auto."
        )


def unreadable_state(folder: Path) -> str | None:
    """Why ``folder/trainer_state.json`` cannot be resumed from (missing, not JSON, no step), or None."""
    path = Path(folder) / "trainer_state.json"
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no trainer_state.json"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"trainer_state.json is unreadable ({type(err).__name__}: {err})"
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return "trainer_state.json has no global_step"
    return None


def is_complete(folder: Path) -> bool:
    """A checkpoint folder with a readable trainer state and model weights (never a ``.tmp-`` one)."""
    folder = Path(folder)
    if folder.name.startswith(STAGING_PREFIX) or unreadable_state(folder) is not None:
        return False
    return any((folder / name).is_file() for name in WEIGHTS)


def latest_checkpoint(checkpoints: Path) -> Path | None:
    """The complete ``checkpoint-N`` with the largest N under ``checkpoints``, or None."""
    complete = [(step, p) for step, p in _numbered(checkpoints) if is_complete(p)]
    return max(complete)[1] if complete else None


def skipped_checkpoints(checkpoints: Path) -> list[str]:
    """One line per ``checkpoint-N`` newer than the latest complete one that cannot be resumed, saying why."""
    latest = latest_checkpoint(checkpoints)
    match = CHECKPOINT_RE.match(latest.name) if latest else None
    newest = int(match.group(1)) if match else -1
    lines = []
    for step, path in sorted(_numbered(checkpoints)):
        if step > newest and not is_complete(path):
            reason = unreadable_state(path) or "no model weights"
            lines.append(f"{path.name} skipped: {reason}; using {latest.name if latest else 'no checkpoint'}")
    return lines


def _numbered(checkpoints: Path) -> list[tuple[int, Path]]:
    checkpoints = Path(checkpoints)
    if not checkpoints.is_dir():
        return []
    return [(int(m.group(1)), p) for p in checkpoints.iterdir() if (m := CHECKPOINT_RE.match(p.name))]


def remove_stale_staging(checkpoints: Path) -> list[str]:
    """Delete ``.tmp-`` folders left by a run killed while saving; returns their names."""
    checkpoints = Path(checkpoints)
    stale = [p for p in checkpoints.glob(f"{STAGING_PREFIX}*") if p.is_dir()] if checkpoints.is_dir() else []
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return [p.name for p in stale]


def resolve_resume(resume: str | None, config: dict[str, Any], run_dir: str | None, root: str = "outputs"):
    """``resume`` -> ``(run directory to continue in or None, message)`` (see module docstring).

    ``config`` is this launch's composed config as a plain dict (secrets redacted, no hydra key);
    ``run_dir`` the run directory given on the command line (``hydra.run.dir=``), if any.
    """
    if resume is None:
        return None, None
    if resume == "auto":
        candidates = [Path(run_dir)] if run_dir else sorted(p.parent for p in Path(root).glob("**/config.yaml"))
        found = [(ckpt.stat().st_mtime, d, ckpt) for d in candidates if (ckpt := latest_checkpoint(d / "checkpoints"))]
        matching = [(t, d, c) for t, d, c in found if _same_config(d / "config.yaml", config)]
        if not matching:
            skipped = f" ({len(found)} with other settings skipped)" if found else ""
            return None, f"resume=auto: no earlier run with these settings has a checkpoint{skipped}; starting fresh."
        _, folder, ckpt = max(matching, key=lambda x: x[0])
        return str(folder), f"resume=auto: continuing {folder} from {ckpt.name}."
    path = Path(resume).expanduser()
    if (path / "checkpoints").is_dir():
        ckpt = latest_checkpoint(path / "checkpoints")
        if ckpt is None:
            raise ConfigError(f"resume={resume!r}: the run directory holds no complete checkpoint.")
        return str(path), f"resuming {path} from {ckpt.name}."
    if (path / "trainer_state.json").is_file() or CHECKPOINT_RE.match(path.name):
        if not is_complete(path):
            raise ConfigError(f"resume={resume!r}: incomplete checkpoint (no trainer_state.json or model weights).")
        owner = path.parent.parent if path.parent.name == "checkpoints" else None
        return (str(owner) if owner else None), f"resuming from checkpoint {path}."
    raise ConfigError(f"resume={resume!r} is neither a run directory nor a checkpoint folder (or use resume=auto).")


BUFFER_FILE = "rlpost_generation_buffer.pt"


def save_generation_buffer(state: dict[str, Any] | None, folder: str | os.PathLike, rank: int) -> None:
    """With ``num_iterations > 1`` TRL reuses one generation batch over several optimizer steps; a
    checkpoint in the middle of that reuse keeps the batch and TRL's micro-step counter (``state``:
    ``{"step", "buffer"}``, the trainer's ``generation_buffer()``; None: nothing to keep), so the resumed
    run trains on the same rollouts instead of sampling new ones. One file per process (``rank``: each
    holds its own slice)."""
    if state is None:
        return
    torch_save_atomic(state, Path(folder) / f"{rank}-{BUFFER_FILE}")


def load_generation_buffer(checkpoint: str | os.PathLike, rank: int, device: Any) -> dict[str, Any] | None:
    """What ``save_generation_buffer`` wrote for process ``rank`` (on ``device``), or None when it wrote nothing;
    the trainer puts it back (``restore_generation_buffer``)."""
    import torch

    path = Path(checkpoint) / f"{rank}-{BUFFER_FILE}"
    if not path.is_file():
        return None
    return torch.load(path, weights_only=True, map_location=device)


STALE_FILE = "rlpost_stale_batches.pt"


def save_stale_batches(state: dict[str, Any] | None, folder: str | os.PathLike, rank: int) -> None:
    """With ``train.staleness = k > 0`` the trainer holds k generated batches not yet trained on
    (rlpost/trainer/staleness.py); a checkpoint keeps them (``state``: the trainer's ``stale_batches_state()``;
    None: nothing to keep), so the resumed run trains on the same rollouts with the same behaviour log-probs. One
    file per process (``rank``: each holds its own slice), written to a temporary name and renamed."""
    if state is None:
        return
    torch_save_atomic(state, Path(folder) / f"{rank}-{STALE_FILE}")


def load_stale_batches(checkpoint: str | os.PathLike, rank: int, device: Any) -> dict[str, Any] | None:
    """What ``save_stale_batches`` wrote for process ``rank`` (on ``device``), or None when it wrote nothing."""
    import torch

    path = Path(checkpoint) / f"{rank}-{STALE_FILE}"
    if not path.is_file():
        return None
    return torch.load(path, weights_only=True, map_location=device)


def torch_save_atomic(obj: Any, path: Path) -> None:
    import torch

    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def checkpoint_to_load(resume: str | None, checkpoints: Path) -> str | None:
    """The checkpoint ``trainer.train(resume_from_checkpoint=...)`` gets, inside the chosen run directory."""
    if resume is None:
        return None
    path = Path(resume).expanduser()
    if resume != "auto" and not (path / "checkpoints").is_dir():
        return str(path)  # a checkpoint folder (checked by resolve_resume)
    ckpt = latest_checkpoint(checkpoints if resume == "auto" else path / "checkpoints")
    return str(ckpt) if ckpt else None


def _same_config(saved: Path, config: dict[str, Any]) -> bool:
    from omegaconf import OmegaConf

    try:
        old = OmegaConf.to_container(OmegaConf.load(saved), resolve=False)
    except Exception:  # an unreadable config.yaml is not a run to continue
        return False
    strip = lambda d: {k: v for k, v in d.items() if k not in IGNORED_KEYS}  # noqa: E731
    return isinstance(old, dict) and strip(old) == strip(config)
