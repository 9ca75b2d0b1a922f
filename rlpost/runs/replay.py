"""Replay: every training rollout with its behaviour log-probs, as parquet under ``<run>/rollouts/``.

Written when ``logging.replay=true`` (default false: when TRL has not computed the rollout
log-probs itself, which is the default one-pass case, recording them costs one extra no-grad
forward per generation batch). ``algorithm=regen`` (rlpost/algorithms/regen.py) trains from it.

    <run>/rollouts/meta.json                       tokenizer fingerprint, G, temperature, reward terms
    <run>/rollouts/step-000003-rank0.parquet        one file per generation batch and process

One row per completion:
    policy_version  int     the trainer's global step when it was sampled (samples.jsonl's ``step``)
    group           int     which prompt group of that batch (rows of a group share prompt_ids)
    prompt, completion  str as the reward functions saw them (JSON text when conversational)
    prompt_ids, completion_ids  list[int]  the exact tokens (no padding)
    behaviour_logps list[float]  log pi_behaviour(token) per completion token, at the run's temperature
    length, truncated, reward, advantage, term/<name> (each reward term, unweighted), row (dataset row, JSON)

The behaviour log-probs are TRL's ``old_per_token_logps`` when it computed them for this batch
and their attention covered every completion token; otherwise one no-grad forward of the
sampling weights over the unmasked completions (``record``'s ``behaviour_logps``: the trainer's
``_sampling_logps``, rlpost/trainer/scoring.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.runs.ranks import is_main
from rlpost.runs.rundir import write_atomic

FORMAT = 1
TERM_PREFIX = "term/"
COLUMNS = (
    "policy_version",
    "group",
    "prompt",
    "completion",
    "prompt_ids",
    "completion_ids",
    "behaviour_logps",
    "length",
    "truncated",
    "reward",
    "advantage",
    "row",
)


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 over the vocabulary and the special token ids: equal iff token ids mean the same text."""
    vocab = sorted(tokenizer.get_vocab().items())
    special = [tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id]
    return hashlib.sha256(json.dumps([vocab, special]).encode()).hexdigest()


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


class ReplayWriter:
    """Called by the trainer's advantage seam with the local rows of each training generation batch."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    def record(
        self,
        trainer,
        output: dict,
        terms: torch.Tensor,
        rewards: torch.Tensor,
        advantages: torch.Tensor,
        inputs: list[dict],
        behaviour_logps: Callable[[dict], torch.Tensor],
    ) -> None:
        """``terms`` [B, R], ``rewards`` [B], ``advantages`` [B] or [B, T]: this process's slice;
        ``behaviour_logps(output)``: log-probs [B, T] of ``output``'s completion tokens under the sampling weights."""
        rollout = trainer.batch  # this process's rollouts (rlpost/trainer/batch.py)
        lengths = torch.tensor(rollout.lengths, device=output["completion_ids"].device)
        logps = output.get("old_per_token_logps")
        if logps is None or bool((output["completion_mask"].sum(1) != lengths).any()):
            steps = torch.arange(output["completion_ids"].size(1), device=lengths.device)
            unmasked = {**output, "completion_mask": (steps[None, :] < lengths[:, None]).long()}
            logps = behaviour_logps(unmasked)
        version = trainer.state.global_step
        group_size = trainer.num_generations
        offset = trainer.accelerator.process_index * len(inputs)
        names = trainer.run.reward.names
        prompt_mask = output["prompt_mask"].bool()
        advantages = advantages.float().mean(1) if advantages.dim() == 2 else advantages.float()
        rows = []
        for i, n in enumerate(rollout.lengths):
            row = {
                "policy_version": version,
                "group": (offset + i) // group_size,
                "prompt": as_text(rollout.prompts[i]),
                "completion": as_text(rollout.completions[i]),
                "prompt_ids": output["prompt_ids"][i][prompt_mask[i]].tolist(),
                "completion_ids": output["completion_ids"][i, :n].tolist(),
                "behaviour_logps": logps[i, :n].float().tolist(),
                "length": n,
                "truncated": bool(rollout.truncated[i]),
                "reward": float(rewards[i]),
                "advantage": float(advantages[i]),
                "row": json.dumps({k: v for k, v in inputs[i].items() if k != "prompt"}, default=str),
            }
            row.update({TERM_PREFIX + name: float(v) for name, v in zip(names, terms[i].tolist())})
            rows.append(row)
        self.write_meta(self.meta(trainer))
        self.write_rows(rows, version, trainer.accelerator.process_index)

    def write_rows(self, rows: list[dict[str, Any]], version: int, rank: int) -> Path:
        """``step-<version>-rank<rank>.parquet``: each process writes its own file (rlpost/runs/ranks.py)."""
        import pandas as pd

        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"step-{version:06d}-rank{rank}.parquet"
        tmp = self.folder / f".{path.name}.tmp"
        pd.DataFrame(rows).to_parquet(tmp, index=False)
        os.replace(tmp, path)
        return path

    def write_meta(self, meta: dict[str, Any]) -> None:
        """``meta.json``, once per replay, by the main process only (rlpost/runs/ranks.py)."""
        path = self.folder / "meta.json"
        if is_main() and not path.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(meta, indent=2) + "\n")

    @staticmethod
    def meta(trainer) -> dict[str, Any]:
        tokenizer = trainer.processing_class
        return {
            "format": FORMAT,
            "tokenizer": getattr(tokenizer, "name_or_path", ""),
            "tokenizer_sha256": tokenizer_fingerprint(tokenizer),
            "num_generations": trainer.num_generations,
            "temperature": trainer.temperature,
            "term_names": list(trainer.run.reward.names),
            "model": trainer.run.model.name,
            "algorithm": trainer.run.algorithm.name,
        }


# ---- reading (algorithm=regen) -------------------------------------------------------------
def replay_folder(path: str | os.PathLike, where: str) -> Path:
    """A replay given as its rollouts/ folder or as the run directory holding one."""
    folder = Path(path)
    if (folder / "rollouts" / "meta.json").exists():
        folder = folder / "rollouts"
    if not folder.is_dir():
        raise ConfigError(f"{where}={str(path)!r}: no such folder (give a run directory or its rollouts/ folder).")
    if not (folder / "meta.json").exists():
        raise ConfigError(
            f"{where}={str(path)!r} holds no replay (rollouts/meta.json): was it run with logging.replay=true?"
        )
    if not sorted(folder.glob("*.parquet")):
        raise ConfigError(f"{where}={str(path)!r} holds no parquet files: the run recorded no training batch.")
    return folder


def read_meta(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "meta.json").read_text())


def check_columns(folder: Path, term_names: list[str], where: str) -> None:
    """Every file has the replay columns and a ``term/<name>`` column for each reward term of the run."""
    import pyarrow.parquet as pq

    for file in sorted(folder.glob("*.parquet")):
        have = set(pq.read_schema(file).names)
        missing = [c for c in COLUMNS if c not in have]
        if missing:
            raise ConfigError(f"{where}: {file.name} lacks the replay columns {missing} (not an rlpost replay?).")
        terms = sorted(c[len(TERM_PREFIX) :] for c in have if c.startswith(TERM_PREFIX))
        absent = [t for t in term_names if t not in terms]
        if absent:
            raise ConfigError(
                f"{where}: {file.name} has no reward term {absent[0]!r} (the run's reward terms: "
                f"{', '.join(term_names)}; the replay's: {', '.join(terms) or '(none)'})."
            )


def read_replay(folder: Path):
    """All rows of one replay folder (pandas DataFrame), in (policy_version, group) order."""
    import pandas as pd

    frames = [pd.read_parquet(f) for f in sorted(folder.glob("*.parquet"))]
    return pd.concat(frames, ignore_index=True)
