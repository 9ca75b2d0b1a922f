"""``rlpost sft``'s settings (conf/sft.yaml): the schema, every check before any model loads, and the job they build.

``build_job(cfg)`` turns one composed config into an ``SFTJob``: the typed settings (an unknown key is named with
the valid ones, a value out of range with its range), the rows (the data's splits, the target of every training
row rendered, so a template that names a missing field fails here), and ``run``, the BuiltRun that held-out
evaluation reads (rlpost/evaluation/held_out.py): ``rlpost train``'s own builder (rlpost/build.py ``build_run``) is
given the job's ``model``, ``data``, ``reward``, ``hardware`` and ``eval`` nodes, so the data task and paths, the
model folder, LoRA targets, reward terms, correctness criterion (``eval/accuracy``), eval sets and hardware are
checked, and evaluated, exactly as in ``rlpost train``. Choice: that view's ``algorithm`` node is a fixed
GRPO advantage and loss (``EVAL_VIEW_ALGORITHM``), built because a BuiltRun holds one and never used; its
``train.max_completion_length`` and ``train.temperature`` are ``eval.max_new_tokens`` and ``eval.temperature``.

Refused here, with the reason: several processes, DeepSpeed and vLLM (``rlpost sft`` runs in one process),
``data/env`` (episodes: single-turn pairs only), a micro batch that does not divide ``train.prompts_per_step``,
an unknown learning-rate schedule, a reward column or ``eval.group_by`` that the held-out rows lack.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from rlpost.core.config import EvalSettings, HardwareConfig, LoggingSettings, check_columns
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.data.sources import DataConfig
from rlpost.models.loading import ModelConfig
from rlpost.run import BuiltRun

# the algorithm node of the evaluation view (module docstring): built, never trained
EVAL_VIEW_ALGORITHM = {"name": "sft", "advantage": {"name": "group_norm"}, "loss": {"name": "clip"}}
GROUPS = ("model", "data", "reward", "hardware")


@dataclass(frozen=True)
class SFTTrainSettings:
    """``train``: the optimizer, the batch and the checkpoints (conf/sft.yaml comments each key)."""

    steps: Annotated[int, Range(ge=1)] = 20
    learning_rate: Annotated[float, Range(gt=0)] = 1e-5
    lr_scheduler: str = "constant"
    warmup_ratio: Annotated[float, Range(ge=0, lt=1, why="a fraction of train.steps")] = 0.0
    weight_decay: Annotated[float, Range(ge=0)] = 0.0
    max_grad_norm: Annotated[float, Range(ge=0, why="0 = no clipping")] = 1.0
    prompts_per_step: Annotated[int, Range(ge=1)] = 8  # rows (prompt + target) per optimizer step
    micro_batch_size: Annotated[int | None, Range(ge=1)] = None  # rows per forward/backward; None = all of a step's
    max_length: Annotated[int, Range(ge=2)] = 512  # prompt + target + EOS tokens; longer rows are cut at the end
    shuffle: bool = True  # rows in a seeded random order (false: the data's order, prompts_per_step rows a step)
    gradient_checkpointing: bool = False
    save_steps: Annotated[int, Range(ge=0, why="0 = only at the end")] = 0
    save_total_limit: Annotated[int, Range(ge=1)] = 2


@dataclass(frozen=True)
class SFTEvalSettings(EvalSettings):
    """``eval``: ``rlpost train``'s held-out evaluation keys, plus what ``train`` sets there for generation."""

    max_new_tokens: Annotated[int, Range(ge=1)] = 32  # rlpost train: train.max_completion_length
    temperature: Annotated[float, Range(gt=0)] = (
        1.0  # sampled evaluation (eval.samples); rlpost train: train.temperature
    )


@dataclass(frozen=True)
class SFTSettings:
    """The composed conf/sft.yaml, typed."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=lambda: DataConfig(task="basic_arithmetic"))
    reward: dict[str, Any] = field(default_factory=dict)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    seed: Annotated[int, Range(ge=0, le=2**32 - 1)] = 0
    run_name: str = "sft"
    resume: str | None = None
    target: str = "{answer}"  # the completion: a format string over the row's fields (rlpost/sft/targets.py)
    train: SFTTrainSettings = field(default_factory=SFTTrainSettings)
    eval: SFTEvalSettings = field(default_factory=SFTEvalSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)  # rlpost train's: trackers, progress, plots

    @property
    def micro_batch_size(self) -> int:
        return self.train.micro_batch_size or self.train.prompts_per_step


@dataclass
class SFTJob:
    """What one ``rlpost sft`` job trains and evaluates, built before any model loads."""

    settings: SFTSettings
    run: BuiltRun  # the evaluation view (module docstring): reward, criterion, eval sets, hardware, eval settings
    prompts: list[Any]  # the training rows' prompts (chat messages or strings)
    targets: list[str]  # their targets, rendered from ``settings.target``
    eval_rows: Any  # the held-out split (a datasets.Dataset)
    set_rows: list[Any] = field(default_factory=list)  # each eval set's held-out split, in run.eval_sets order


def build_job(cfg: Any) -> SFTJob:
    """Validate the composed ``rlpost sft`` config and load its rows; no model loads. Raises ConfigError."""
    from rlpost.core.schema import build_config, composed_mapping
    from rlpost.data.sources import load_datasets
    from rlpost.sft.targets import check_template, render_targets

    raw = composed_mapping(cfg)
    raw.pop("recipe", None)
    missing = [g for g in GROUPS if not raw.get(g)]
    if missing:
        raise ConfigError(f"Config group {missing[0]!r} is not set; choose one with {missing[0]}=<choice>.")
    settings = build_config(SFTSettings, raw, "")
    check_template(settings.target)
    _check_settings(settings)
    env = settings.data.env.get("name") or "none"
    if env != "none":
        raise ConfigError(
            f"data/env={env} plays episodes; rlpost sft trains single-turn prompt-target pairs. "
            "Use rlpost train for episodes."
        )
    run = eval_view(raw, settings)
    train_set, eval_set = load_datasets(run.data, run.data_transform)
    if "prompt" not in train_set.column_names:
        raise ConfigError(
            f"the training rows have no prompt column; their columns are: {', '.join(train_set.column_names)}"
        )
    _check_columns(run, eval_set)
    targets = render_targets(settings.target, train_set)
    set_rows = [load_datasets(spec.data, spec.transform)[1] for spec in run.eval_sets]
    return SFTJob(settings, run, list(train_set["prompt"]), targets, eval_set, set_rows)


def _check_settings(s: SFTSettings) -> None:
    from transformers.trainer_utils import SchedulerType

    t, hw = s.train, s.hardware
    if t.prompts_per_step % s.micro_batch_size:
        raise ConfigError(
            f"train.micro_batch_size={t.micro_batch_size} does not divide train.prompts_per_step={t.prompts_per_step}: "
            "a step is a whole number of micro batches."
        )
    schedules = [v.value for v in SchedulerType]
    if t.lr_scheduler not in schedules:
        raise ConfigError(f"Invalid train.lr_scheduler={t.lr_scheduler!r}. Valid choices: {', '.join(schedules)}.")
    if hw.num_processes > 1:
        raise ConfigError(
            f"hardware.num_processes={hw.num_processes}: rlpost sft runs in one process; set hardware.num_processes=1."
        )
    if hw.zero_stage or hw.use_vllm:
        what = f"runs DeepSpeed ZeRO-{hw.zero_stage}" if hw.zero_stage else "samples rollouts with vLLM"
        raise ConfigError(
            f"hardware={hw.name} {what}; rlpost sft runs in one process on one device: use hardware=cpu or hardware=gpu."
        )
    if s.resume not in (None, "auto"):
        from pathlib import Path

        if not Path(s.resume).expanduser().is_dir():
            raise ConfigError(
                f"resume={s.resume!r} is neither a run directory nor a checkpoint folder (or use resume=auto)."
            )


def eval_view(raw: dict[str, Any], s: SFTSettings) -> BuiltRun:
    """The BuiltRun of ``rlpost train``'s builder over this job's groups and eval keys (module docstring)."""
    from rlpost.build import build_run

    t, ev = s.train, s.eval
    view_train = {
        "steps": t.steps,
        "learning_rate": t.learning_rate,
        "lr_scheduler": t.lr_scheduler,
        "warmup_ratio": t.warmup_ratio,
        "weight_decay": t.weight_decay,
        "max_grad_norm": t.max_grad_norm,
        "max_completion_length": ev.max_new_tokens,
        "temperature": ev.temperature,
        "gradient_checkpointing": t.gradient_checkpointing,
        "save_steps": t.save_steps,
        "save_total_limit": t.save_total_limit,
    }
    own = {f.name for f in fields(EvalSettings)}
    view = {
        **{g: raw[g] for g in GROUPS},
        "algorithm": EVAL_VIEW_ALGORITHM,
        "seed": s.seed,
        "run_name": s.run_name,
        "resume": s.resume,
        "train": view_train,
        "eval": {k: v for k, v in (raw.get("eval") or {}).items() if k in own},
        "logging": raw.get("logging") or {},
    }
    return build_run(view)


def _check_columns(run: BuiltRun, eval_set) -> None:
    """Every held-out column a reward term or ``eval.*`` reads exists (the reward scores held-out rows only)."""
    columns = eval_set.column_names
    for name, func in zip(run.reward.names, run.reward.funcs):
        for param, col in func.data_columns():
            if col not in columns:
                raise ConfigError(
                    f"reward term {name}: params.{param}={col!r} names no column of the held-out data; "
                    f"its columns are: {', '.join(columns)}"
                )
    check_columns(run.settings.eval.data_columns(), columns, "the eval split")
