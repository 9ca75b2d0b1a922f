"""``rlpost probe``: reward-seeking rates of a run's checkpoints, step by step (seed 000 #28).

    rlpost probe run=<run dir>                      # its base model (step 0) and every saved checkpoint
    rlpost probe run=<run dir> belief=context       # the in-context proxy (no fine-tuning per checkpoint)
    rlpost probe model=smollm2-135m                 # one model

Each model is probed with the bundled conflict scenarios (rlpost/evaluation/probe.py): the probability that it
takes the grader's side when a synthetic-document belief says the grader rewards it, the same when
the contrastive belief says the grader rewards what the user or developer wants, and their
difference, ``probe/shift``. Writes ``probe.json`` (one row per checkpoint with its step, and the
per-scenario numbers) and ``probe.png`` (the rates against the training step) into the run's
``probe/`` folder, or ``out=``. A run trains with ``train.save_steps=N`` and a large
``train.save_total_limit`` to keep the checkpoints to probe; LoRA runs are refused (merge them first
with ``rlpost merge``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from rlpost.app import Job, launch, tool
from rlpost.core.config import HardwareConfig
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.models.loading import ModelConfig

PLOT_KEYS = ("probe/grader_rate", "probe/party_rate", "probe/shift")


@dataclass(frozen=True)
class ProbeSettings:
    model: ModelConfig = field(default_factory=ModelConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    run: str | None = None  # an rlpost run directory: probe its base model and its checkpoints
    checkpoints: list[str] | None = None  # names under checkpoints/ (null: every checkpoint-N and final)
    base: bool = True  # with run=, also probe the run's base model as step 0
    scenarios: str = "recipes/data/reward_seeking_scenarios.jsonl"  # the conflict scenarios (jsonl)
    belief: Literal["sdf", "context"] = "sdf"  # how the grader belief is set: fine-tuning or in context
    sdf_steps: Annotated[int, Range(ge=1)] = 20  # fine-tuning steps per belief and model
    sdf_lr: Annotated[float, Range(gt=0)] = 1e-5  # its AdamW learning rate
    sdf_batch_size: Annotated[int, Range(ge=1)] = 4  # documents per step
    seed: int = 0  # document order of the fine-tuning
    out: str | None = None  # the folder of probe.json and probe.png (null: <run>/probe, else the Hydra run dir)
    progress: bool = True  # a progress bar over the models


def checkpoint_step(name: str, final_step: int | None) -> int | None:
    """``checkpoint-N`` -> N; ``final`` -> the run's last step; anything else -> None."""
    match = re.fullmatch(r"checkpoint-(\d+)", name)
    if match:
        return int(match.group(1))
    return final_step if name == "final" else None


def run_final_step(run_dir: Path) -> int | None:
    summary = run_dir / "summary.json"
    if summary.is_file():
        steps = json.loads(summary.read_text()).get("steps")
        return int(steps) if steps is not None else None
    return None


def models_to_probe(s: ProbeSettings) -> list[tuple[str, int, ModelConfig]]:
    """``(label, step, model config)`` in step order; checks every folder before any model loads."""
    from rlpost.core.schema import build_config
    from rlpost.models.weights import is_adapter, is_run_dir, resolve_checkpoint, run_config

    if s.run is None:
        return [(s.model.display_name, 0, s.model)]
    run_dir = Path(s.run).expanduser()
    if not is_run_dir(run_dir):
        raise ConfigError(f"run={s.run!r} is not an rlpost run directory (no config.yaml and checkpoints/).")
    final_step = run_final_step(run_dir)
    names = s.checkpoints
    if names is None:
        names = [p.name for p in (run_dir / "checkpoints").iterdir() if checkpoint_step(p.name, final_step) is not None]
    found: dict[int, tuple[str, ModelConfig]] = {}
    for name in names:
        folder = resolve_checkpoint(run_dir, "run", name)
        if is_adapter(folder):
            raise ConfigError(
                f"run={s.run!r}: checkpoints/{name} is a LoRA adapter; merge it into its base first "
                "(rlpost merge) and probe the merged model."
            )
        step = checkpoint_step(name, final_step)
        if step is None:
            raise ConfigError(
                f"checkpoints=[{name}]: cannot tell its training step (names are checkpoint-N or final, and final "
                "needs the run's summary.json)."
            )
        found.setdefault(step, (name, build_config(ModelConfig, {"source": "hf", "path": str(folder)}, "model")))
    if s.base:
        base = build_config(ModelConfig, run_config(run_dir)["model"], "model")
        found.setdefault(0, ("base", base))
    if not found:
        raise ConfigError(f"run={s.run!r} has no checkpoint to probe (train with train.save_steps=N to keep some).")
    return [(name, step, cfg) for step, (name, cfg) in sorted(found.items())]


def check(s: ProbeSettings, overrides: list[str]) -> ProbeSettings:
    from rlpost.data.sources import RESOURCES
    from rlpost.evaluation.probe import load_scenarios

    if s.run is not None and any(o.split("=", 1)[0] == "model" for o in overrides):
        raise ConfigError("Give either run=<run directory> or model=<choice>, not both: they name two models.")
    path = Path(s.scenarios)
    load_scenarios(path if path.is_absolute() or path.exists() else RESOURCES / path)
    models_to_probe(s)
    return s


def output_folder(s: ProbeSettings, output_dir: str) -> Path:
    if s.out:
        return Path(s.out)
    return Path(s.run).expanduser() / "probe" if s.run else Path(output_dir)


def run(s: ProbeSettings, output_dir: str, overrides: list[str]) -> int:
    from tqdm.auto import tqdm

    from rlpost.analysis.plots import plot_curves
    from rlpost.data.sources import RESOURCES
    from rlpost.evaluation.probe import ProbeConfig, load_scenarios, probe
    from rlpost.models.loading import load_model, load_tokenizer
    from rlpost.runs.rundir import write_atomic

    path = Path(s.scenarios)
    scenarios = load_scenarios(path if path.is_absolute() or path.exists() else RESOURCES / path)
    cfg = ProbeConfig(s.belief, s.sdf_steps, s.sdf_lr, s.sdf_batch_size, s.seed)
    rows = []
    for name, step, model_cfg in tqdm(models_to_probe(s), desc="probe", disable=not s.progress):
        model = load_model(model_cfg).to(s.hardware.device).eval()
        result = probe(model, load_tokenizer(model_cfg), scenarios, cfg)
        rows.append({"step": step, "checkpoint": name, **result["metrics"], "scenarios": result["scenarios"]})
        del model  # the next checkpoint loads into freed memory
    folder = output_folder(s, output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    result = {"belief": s.belief, "run": s.run, "overrides": overrides, "rows": rows}
    write_atomic(folder / "probe.json", json.dumps(result, indent=2) + "\n")
    plot = plot_curves({f"belief={s.belief}": rows}, folder / "probe.png", PLOT_KEYS) if len(rows) > 1 else None
    print(f"{'step':>6}  {'checkpoint':<16} {'grader_rate':>11} {'party_rate':>10} {'shift':>7}")
    for r in rows:
        print(
            f"{r['step']:>6}  {r['checkpoint']:<16} {r['probe/grader_rate']:>11.3f} {r['probe/party_rate']:>10.3f} "
            f"{r['probe/shift']:>7.3f}"
        )
    print(f"results: {folder / 'probe.json'}" + (f"; plot: {plot}" if plot else ""))
    return 0


def hydra_folder_with_the_output(jobs: list[Job], overrides: list[str], multirun: bool) -> list[str]:
    """A single probe of ``run=`` (or with ``out=``) keeps Hydra's log and ``.hydra/`` in its output folder,
    not in ``outputs/probe/<date>/`` of the launch directory; a given ``hydra.run.dir`` or a sweep stays as asked."""
    settings = jobs[0].built
    given = any(o.split("=", 1)[0] == "hydra.run.dir" for o in overrides)
    if multirun or given or not (settings.run or settings.out):
        return []
    return [f"hydra.run.dir={output_folder(settings, '')}"]


APP = tool("probe", "probe", ProbeSettings, check, run, prelaunch=hydra_folder_with_the_output)


def main(args: list[str]) -> int:
    return launch(APP, args)
