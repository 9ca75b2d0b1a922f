"""One rank of a 2-process (gloo) write test: ``python support/ranks.py KIND FOLDER REPEATS``.

Started twice by ``tests/integration/test_ranks.py`` with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set, as
torchrun would. Every repeat, both ranks arrive at the write of KIND with a random skew of 0-60 ms
(ranks never finish a step at the same instant) and call the same rlpost function, as the trainer
does; the ranks then meet at a barrier. At the end rank 0 prints one JSON line describing what is
on disk, which the test checks. Any exception exits non-zero (the test shows its traceback).
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from rlpost.runs.ranks import barrier, is_main, rank, write_folder


def skew(step: int) -> None:
    time.sleep(random.Random(1000 * step + rank()).uniform(0.0, 0.06))


def tiny_model():
    from transformers import AutoModelForCausalLM

    from rlpost.models.loading import ModelConfig, tiny_random_folder

    return AutoModelForCausalLM.from_pretrained(tiny_random_folder(ModelConfig(source="tiny_random")))


def final_model(folder: Path, repeats: int) -> dict:
    """checkpoints/final as train.py writes it: every rank calls the save, the main process writes."""
    model = tiny_model()
    for step in range(repeats):
        with torch.no_grad():
            next(model.parameters()).fill_(float(step))  # each repeat's final is recognisable
        skew(step)
        write_folder(folder / "final", lambda staging: model.save_pretrained(staging, is_main_process=is_main()))
    from safetensors.torch import load_file

    weights = load_file(str(folder / "final" / "model.safetensors"))
    first = next(iter(model.state_dict()))
    return {"final_value": float(weights[first].flatten()[0]), "left": sorted(p.name for p in folder.iterdir())}


def checkpoints(folder: Path, repeats: int) -> dict:
    """checkpoint-N as CheckpointSeams writes it: shared files by the main process, one RNG file per rank,
    renamed into place, older ones rotated away (save_total_limit=2)."""
    from transformers.trainer_utils import rotate_checkpoints

    from rlpost.runs.checkpoints import latest_checkpoint
    from rlpost.runs.ranks import on_main

    model = tiny_model()
    for step in range(1, repeats + 1):

        def write(staging: Path, step=step) -> Path:
            out = staging / f"checkpoint-{step}"
            out.mkdir(parents=True, exist_ok=True)
            torch.save({"rank": rank()}, out / f"rng_state_{rank()}.pth")
            if is_main():
                model.save_pretrained(out)
                (out / "trainer_state.json").write_text(json.dumps({"global_step": step}))
            return out

        skew(step)
        write_folder(folder / f"checkpoint-{step}", write)
        on_main(lambda: rotate_checkpoints(str(folder), 2))
    latest = latest_checkpoint(folder)
    return {"latest": latest.name, "files": sorted(p.name for p in latest.iterdir()), "left": _names(folder)}


def run_files(folder: Path, repeats: int) -> dict:
    """config, metrics, samples, events, summary, eval_before.json: every rank calls, the main one writes."""
    from omegaconf import OmegaConf

    from rlpost.runs.rundir import RunDirectory

    run = RunDirectory(folder)
    for step in range(repeats):
        skew(step)
        run.write_config(OmegaConf.create({"seed": step}), [f"seed={step}"])
        run.append_metrics({"step": step, "loss": 0.5})
        run.append_samples([{"step": step, "completion": "x"}])
        run.append_event({"step": step, "event": "test"})
        run.write_summary({"steps": step})
        run.write_json("eval_before.json", {"eval/accuracy": step / repeats})
        barrier()
    return {name: _lines(folder / name) for name in ("metrics.jsonl", "samples.jsonl", "events.jsonl")} | {
        "summary": json.loads((folder / "summary.json").read_text()),
        "left": _names(folder),
    }


def plots(folder: Path, repeats: int) -> dict:
    from rlpost.analysis.plots import plot_curves

    rows = [{"step": s, "reward": s / 10, "loss": 1 - s / 10} for s in range(10)]
    for step in range(repeats):
        skew(step)
        plot_curves({"run": rows}, folder / "plots" / "training.png")
        barrier()
    png = (folder / "plots" / "training.png").read_bytes()
    return {"png": png[:8] == b"\x89PNG\r\n\x1a\n" and png.rstrip().endswith(b"IEND\xaeB`\x82"), "left": _names(folder)}


def replay(folder: Path, repeats: int) -> dict:
    """rollouts/: one parquet per rank and batch, meta.json by the main process."""
    from rlpost.runs.replay import ReplayWriter, read_replay

    writer = ReplayWriter(folder / "rollouts")
    for step in range(repeats):
        skew(step)
        writer.write_meta({"format": 1, "term_names": ["a"]})
        writer.write_rows([{"policy_version": step, "group": rank(), "reward": float(rank())}], step, rank())
        barrier()
    table = read_replay(folder / "rollouts")
    return {"rows": len(table), "ranks": sorted(set(table["group"])), "left": _names(folder / "rollouts")}


def sweep_summary(folder: Path, repeats: int) -> dict:
    from rlpost.analysis.sweep import write_sweep_files

    for job in ("0", "1"):
        (folder / job).mkdir(parents=True, exist_ok=True)
        if is_main():
            (folder / job / "overrides.yaml").write_text(f"- seed={job}\n")
            (folder / job / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    barrier()
    for step in range(repeats):
        skew(step)
        files = write_sweep_files(folder, folder, ["reward"], [], ["reward"])
        assert files["jobs"] == 2
        barrier()
    return {"table": (folder / "sweep_summary.md").read_text(), "left": _names(folder)}


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


KINDS = {f.__name__: f for f in (final_model, checkpoints, run_files, plots, replay, sweep_summary)}

if __name__ == "__main__":
    kind, folder, repeats = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    result = KINDS[kind](folder, repeats)
    barrier()
    if is_main():
        print("RESULT " + json.dumps(result))
    dist.destroy_process_group()
