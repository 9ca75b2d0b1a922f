"""The top-level run schema and its mapping onto ``trl.GRPOConfig``.

Component nodes (``algorithm.loss``, ``reward.terms[i]`` ...) are validated against their own
``Config`` dataclasses in ``build.py``; this module types everything else. Every dataclass here
mirrors a block of ``conf/config.yaml`` or a group file, field for field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


@dataclass(frozen=True)
class TrainSettings:
    steps: Annotated[int, Range(ge=1)] = 20
    learning_rate: Annotated[float, Range(gt=0)] = 1e-5
    lr_scheduler: str = "constant"
    warmup_ratio: Annotated[float, Range(ge=0, lt=1, why="a fraction of train.steps")] = 0.0
    weight_decay: Annotated[float, Range(ge=0)] = 0.0
    max_grad_norm: Annotated[float, Range(ge=0, why="0 = no clipping")] = 1.0
    num_generations: Annotated[int, Range(ge=2, why="a group needs at least 2 completions to have a baseline")] = 4
    completions_per_step: Annotated[int, Range(ge=2)] = 8
    micro_batch_size: Annotated[int | None, Range(ge=1)] = None
    num_iterations: Annotated[int, Range(ge=1)] = 1
    minibatches: Annotated[int, Range(ge=1, why="optimizer steps per generation batch")] = 1
    # simulated async RL (rlpost/trainer/staleness.py): each step trains on the batch generated this many steps earlier
    staleness: Annotated[int, Range(ge=0, why="0 = on-policy")] = 0
    # what a stale batch's PPO ratio is taken against: the policy that trains it, or the one that generated it
    staleness_anchor: Literal["current", "behaviour"] = "current"
    max_completion_length: Annotated[int, Range(ge=1)] = 32
    temperature: Annotated[float, Range(gt=0)] = 1.0
    top_p: Annotated[float, Range(gt=0, le=1)] = 1.0
    top_k: Annotated[int, Range(ge=0, why="0 = off")] = 0
    gradient_checkpointing: bool = False
    logprob_head: Literal["auto", "trl", "compact"] = "auto"  # who scores the tokens (rlpost/trainer/logprobs.py)
    # tokens per vocabulary projection of the compact head (memory: chunk x vocab floats)
    logprob_chunk: Annotated[int, Range(ge=1)] = 1024
    shared_prefix: bool = True  # each distinct prompt runs once per batch: generation prefill and compact-head forward
    # rollout generation's KV cache: preallocated buffers (rlpost/generation/kv_cache.py) or HF's, grown by concatenation
    kv_cache: Literal["preallocated", "dynamic"] = "preallocated"
    packing: bool = True  # compact head + shared prefix: a prompt and its completions in one row, no padding run
    # longest block (a prompt and its completions); a batch with a longer one runs with the shared prefix
    packing_max_tokens: Annotated[int, Range(ge=1)] = 8192
    # from this block length on: one row, segment attention (rlpost/logprobs/segment_attention.py); below: dense masks
    packing_segment_min_tokens: Annotated[int, Range(ge=0)] = 512
    cpu_matmul: Literal["auto", "aten", "onednn"] = "auto"  # fp32 linears on CPU: PyTorch's (MKL) or oneDNN's
    # decode steps of up to 16 rows through rlpost's compiled kernel (rlpost/generation/skinny_matmul.py) unless cpu_matmul=aten
    decode_kernel: bool = True
    # with the decode kernel: a Llama/Qwen2 decode step as one C++ call per decoder layer (rlpost/generation/fused_decode.py)
    fused_decode: bool = True
    save_steps: Annotated[int, Range(ge=0, why="0 = only at the end")] = 0
    save_total_limit: Annotated[int, Range(ge=1)] = 2


@dataclass(frozen=True)
class EvalSettings:
    at_start: bool = True
    at_end: bool = True
    every: Annotated[int, Range(ge=0, why="0 = off")] = 0
    size: Annotated[int, Range(ge=1)] = 100
    batch_size: Annotated[int, Range(ge=1)] = 50
    greedy: bool = True
    group_by: str | None = None
    # a data column naming the question a row is a variant of (AIR's intent_id): group accuracy and consistency
    # over each question's variants (rlpost/evaluation/invariance.py); needs a correctness criterion
    variants_of: str | None = None
    # a data column of numeric targets: CRPS, central-interval coverage and rank correlation of the eval.samples
    # sampled predictions of each prompt (rlpost/evaluation/calibration.py); needs samples >= 2
    calibration: str | None = None
    calibration_level: Annotated[float, Range(gt=0, lt=1)] = 0.8  # the central interval whose coverage is reported
    # a data column of each prompt's user turn without its demonstrations (data=few_shot_ops's zero_shot): a second
    # greedy pass on it and the accuracy with minus without the demonstrations (rlpost/evaluation/few_shot.py)
    without_demos: str | None = None
    correct_term: str | None = "auto"  # the reward term behind eval/accuracy (rlpost/scoring/correctness.py)
    correct_threshold: Annotated[float, Range()] = 1.0  # a completion is correct when that term scores at least this
    samples: Annotated[int, Range(ge=0, why="0 = greedy only")] = 0  # sampled completions per prompt
    pass_k: list[Annotated[int, Range(ge=1)]] = field(
        default_factory=lambda: [1, 4]
    )  # pass@k and maj@k for each k <= samples
    majority_answer: str | None = "last_number"  # what a sample votes for in maj@k (null: no maj@k)
    sets: list[Any] = field(default_factory=list)  # more held-out sets (rlpost/evaluation/sets.py)
    # what a train job returns (hydra/sweeper=search maximizes or minimizes it); auto: eval/accuracy when
    # the run has a correctness criterion, else eval/reward (build_run resolves it)
    objective: str = "auto"
    objective_mode: Literal["max", "min"] = "max"  # checkpoints/best keeps the highest (max) or lowest (min) objective

    def data_columns(self) -> dict[str, str]:
        """``{"eval.<key>": column}``: every held-out data column the evaluation reads (checked before a model loads)."""
        return readout_columns(self, "eval.")


def readout_columns(settings: Any, prefix: str = "") -> dict[str, str]:
    """``{"<prefix><key>": column}`` of the held-out readouts ``settings`` names (``group_by``, ``variants_of``,
    ``calibration``, ``without_demos``: the run's ``eval``, an eval set, ``rlpost eval``), the unset ones left out."""
    keys = ("group_by", "variants_of", "calibration", "without_demos")
    return {f"{prefix}{key}": getattr(settings, key) for key in keys if getattr(settings, key) is not None}


def check_columns(named: dict[str, str], columns: list[str], split: str) -> None:
    """Each ``{key: column}`` of ``named`` is one of ``columns``, the data of ``split`` ("the eval split"), or a
    ConfigError naming the key and every column there is."""
    for key, column in named.items():
        if column not in columns:
            raise ConfigError(f"{key}={column!r} is not a column of {split}; its columns are: {', '.join(columns)}")


TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio")  # logging.trackers (rlpost/runs/trackers.py)
Tracker = Literal["tensorboard", "wandb", "mlflow", "trackio"]


@dataclass(frozen=True)
class LoggingSettings:
    # where every logged metric goes besides metrics.jsonl: transformers' report_to integrations, offline,
    # their files in the run directory (rlpost/runs/trackers.py)
    trackers: list[Tracker] = field(default_factory=lambda: ["tensorboard"])
    project: str = "rlpost"  # wandb's project, MLflow's experiment, trackio's project
    wandb_mode: Literal["offline", "online"] = "offline"  # with wandb in trackers; online needs WANDB_API_KEY
    mlflow_uri: str | None = None  # with mlflow in trackers: its tracking URI (None: file:<run>/mlruns)
    # deprecated (before logging.trackers); None = not set. tensorboard: true adds it to trackers, false removes it
    tensorboard: bool | None = None
    # deprecated: disabled removes wandb from trackers, offline/online adds it in that mode (logging.wandb_mode)
    wandb: Literal["disabled", "offline", "online"] | None = None
    wandb_project: str | None = None  # deprecated: logging.project
    samples_per_step: Annotated[int, Range(ge=0)] = 4
    progress: bool = True
    plots: bool = True
    replay: bool = False  # rollouts + behaviour log-probs as parquet under <run>/rollouts/ (rlpost/runs/replay.py)

    def active_trackers(self) -> list[str]:
        """``trackers`` in order, without repeats, after the deprecated ``tensorboard`` / ``wandb`` keys."""
        names: list[str] = list(dict.fromkeys(self.trackers))
        for name, on in (
            ("tensorboard", self.tensorboard),
            ("wandb", None if self.wandb is None else self.wandb != "disabled"),
        ):
            if on is True and name not in names:
                names.append(name)
            if on is False and name in names:
                names.remove(name)
        return names

    @property
    def wandb_run_mode(self) -> str:
        """wandb's mode: the deprecated ``wandb`` key when it names one, else ``wandb_mode``."""
        return self.wandb if self.wandb in ("offline", "online") else self.wandb_mode

    @property
    def project_name(self) -> str:
        return self.wandb_project or self.project

    def deprecations(self) -> list[str]:
        """One line per deprecated key that is set, saying what to write instead."""
        lines = []
        if self.tensorboard is not None or self.wandb is not None:
            keys = [
                f"logging.{k}={str(v).lower()}"
                for k, v in (("tensorboard", self.tensorboard), ("wandb", self.wandb))
                if v is not None
            ]
            names = ",".join(self.active_trackers())
            mode = f" logging.wandb_mode={self.wandb}" if self.wandb in ("offline", "online") else ""
            lines.append(f"{' '.join(keys)} is deprecated: write logging.trackers=[{names}]{mode}")
        if self.wandb_project is not None:
            lines.append(f"logging.wandb_project is deprecated: write logging.project={self.wandb_project}")
        return lines


@dataclass(frozen=True)
class HardwareConfig:
    name: str = "cpu"
    device: Literal["cpu", "cuda"] = "cpu"
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    num_processes: Annotated[int, Range(ge=1)] = 1
    use_vllm: bool = False
    # ---- scale-out (rlpost/launch/): DeepSpeed ZeRO, multi-node accelerate launch, vLLM rollouts ----
    # 0 = no DeepSpeed; 1, 2 or 3 = DeepSpeed ZeRO stage (config written to <run>/deepspeed.json)
    zero_stage: Annotated[int, Range(ge=0, le=3, why="0 (no DeepSpeed), 1, 2, 3")] = 0
    offload: Literal["none", "cpu"] = "none"  # ZeRO-3 offload of optimizer state and parameters to CPU memory
    # machines of a multi-node run (num_processes counts processes over all machines)
    num_machines: Annotated[int, Range(ge=1)] = 1
    machine_rank: Annotated[int, Range(ge=0)] = 0  # this machine's rank (0 = the main machine)
    main_process_ip: str | None = None  # address of machine 0 (multi-node)
    main_process_port: Annotated[int, Range(ge=1, le=65535)] = 29500  # rendezvous port on machine 0
    vllm_mode: Literal["colocate", "server"] = "colocate"  # vLLM in the training processes or a separate server
    vllm_gpu_memory_utilization: Annotated[float, Range(gt=0, le=1)] = 0.3  # GPU memory share of colocated vLLM
    vllm_tensor_parallel_size: Annotated[int, Range(ge=1)] = 1  # tensor parallelism of colocated vLLM
    vllm_server_host: str = "0.0.0.0"  # rlpost serve's host (vllm_mode=server)
    vllm_server_port: Annotated[int, Range(ge=1, le=65535)] = 8000  # rlpost serve's port (vllm_mode=server)


@dataclass(frozen=True)
class OverlongSettings:
    filter: bool = False
    soft_penalty: bool = False
    cache_len: Annotated[int, Range(ge=1)] = 8
    factor: Annotated[float, Range(ge=0)] = 1.0


@dataclass(frozen=True)
class AlgorithmNode:
    """The keys of the ``algorithm`` node (a bundle, conf/algorithm/<name>.yaml). Component sub-nodes
    (advantage, loss, ...) stay mappings here: ``build.py`` builds each against its own ``Config``."""

    name: str = "custom"  # the bundle, shown by rlpost show
    # the trainer class: a key of rlpost.algorithms.TRAINERS
    trainer: Literal["grpo", "ppo", "regen", "ug_ttt"] = "grpo"
    advantage: Any = None
    loss: Any = None
    regularizers: Any = None  # {name: params}
    grad: Any = None
    aggregation: str = "seq-mean-token-mean"
    kl: Any = None  # KLConfig (rlpost/losses/kl.py)
    dynamic_sampling: bool = False
    # dynamic sampling: extra generation rounds whose informative groups replace the dropped ones (0 = mask only;
    # nothing without dynamic_sampling)
    max_refill_rounds: Annotated[int, Range(ge=0, why="0 = mask the dropped groups only")] = 0
    overlong: Any = None  # OverlongSettings
    correction: Any = None
    rollout: Any = None
    select: Any = None  # which sampled trajectories the update uses (rlpost/select/)
    replay: Any = None  # offline training from recorded rollouts (trainer=regen, rlpost/algorithms/regen.py)
    regen: Any = None  # its off-policy correction
    safety: Any = None  # SafetySettings (rlpost/safety/config.py)
    critic: Any = None  # CriticConfig (trainer=ppo, rlpost/models/critic.py)
    ensemble: Any = None  # EnsembleConfig (trainer=ug_ttt, rlpost/models/lora_ensemble.py)


@dataclass(frozen=True)
class RewardNode:
    """The keys of the ``reward`` node; ``terms`` and ``combine`` are built by ``build.py``."""

    terms: Any = None  # [{name, weight, params, on_failure, timeout_s}]
    combine: Any = None  # {name: weighted_sum, ...}
    on_failure: Any = None  # the default failure policy of every term (rlpost/scoring/guard.py)
    timeout_s: Any = None
    breaker: Any = None  # when repeated failures stop the run (rlpost/scoring/breaker.py)


@dataclass(frozen=True)
class BatchPlan:
    """The batch arithmetic of one optimizer step (per process unless said otherwise)."""

    world_size: int
    num_generations: int  # G
    completions_per_step: int  # all processes
    prompts_per_step: int  # all processes
    micro_batch_size: int  # completions per forward/backward on one process
    grad_accum: int  # micro-batches per optimizer step
    max_completion_length: int

    @property
    def max_tokens_per_step(self) -> int:
        return self.completions_per_step * self.max_completion_length


def plan_batch(train: TrainSettings, world_size: int) -> BatchPlan:
    """Check the batch settings and derive gradient accumulation; ConfigError names the keys."""
    g, total = train.num_generations, train.completions_per_step
    if g < 2:
        raise ConfigError(f"train.num_generations={g}: a group needs at least 2 completions to have a baseline.")
    if total % g:
        raise ConfigError(
            f"train.completions_per_step={total} is not a multiple of train.num_generations={g}: "
            f"every prompt's group must fit in one step (try {max(g, total // g * g)})."
        )
    if total % world_size:
        raise ConfigError(
            f"train.completions_per_step={total} does not split over {world_size} processes (hardware.num_processes)."
        )
    if train.minibatches < 1:
        raise ConfigError(f"train.minibatches={train.minibatches} must be >= 1 (optimizer steps per generation batch).")
    per_process = total // world_size
    micro = train.micro_batch_size or per_process
    if per_process % micro:
        raise ConfigError(
            f"train.micro_batch_size={micro} does not divide the {per_process} completions per process and step "
            f"(train.completions_per_step={total} over {world_size} processes)."
        )
    return BatchPlan(
        world_size=world_size,
        num_generations=g,
        completions_per_step=total,
        prompts_per_step=total // g,
        micro_batch_size=micro,
        grad_accum=per_process // micro,
        max_completion_length=train.max_completion_length,
    )


def checkpointing_arg() -> str:
    """transformers' name for activation checkpointing: ``activation_checkpointing`` where it exists (5.2x; the old
    ``gradient_checkpointing`` then warns that it is deprecated), else ``gradient_checkpointing``."""
    from transformers import TrainingArguments

    names = {f.name for f in fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def grpo_config_kwargs(
    train: TrainSettings,
    logging: LoggingSettings,
    hardware: HardwareConfig,
    plan: BatchPlan,
    *,
    seed: int,
    output_dir: str,
    beta: float,
    mask_truncated: bool,
    run_name: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``trl.GRPOConfig`` of this run (the one place rlpost maps onto TRL)."""
    report_to = logging.active_trackers()  # transformers' integrations (rlpost/runs/trackers.py configures them)
    return dict(
        output_dir=output_dir,
        seed=seed,
        data_seed=seed,
        max_steps=train.steps,
        learning_rate=train.learning_rate,
        lr_scheduler_type=train.lr_scheduler,
        warmup_steps=train.warmup_ratio,  # a float < 1 is a ratio of max_steps
        weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm,
        per_device_train_batch_size=plan.micro_batch_size,
        gradient_accumulation_steps=plan.grad_accum,
        num_generations=plan.num_generations,
        num_iterations=train.num_iterations,
        # PPO-style mini-batches: one generation batch feeds `minibatches` optimizer steps per pass
        **({"steps_per_generation": plan.grad_accum * train.minibatches} if train.minibatches > 1 else {}),
        max_completion_length=train.max_completion_length,
        temperature=train.temperature,
        top_p=train.top_p,
        top_k=train.top_k,
        **{checkpointing_arg(): train.gradient_checkpointing},
        beta=beta,
        mask_truncated_completions=mask_truncated,
        loss_type="grpo",  # never reached: RLPostTrainer owns the loss
        bf16=hardware.precision == "bf16",
        fp16=hardware.precision == "fp16",
        use_cpu=hardware.device == "cpu",
        use_vllm=hardware.use_vllm,
        **_vllm_kwargs(hardware),  # scale-out (rlpost/launch/): vllm_mode and its settings when use_vllm
        logging_steps=1,
        save_strategy="steps" if train.save_steps else "no",
        save_steps=train.save_steps or 500,
        save_total_limit=train.save_total_limit,
        report_to=report_to or "none",
        **_trackio_kwargs(logging, report_to),
        disable_tqdm=True,  # rlpost draws its own progress bar
        log_completions=False,  # rlpost writes samples.jsonl itself
        remove_unused_columns=False,
        run_name=run_name,
    )


def _trackio_kwargs(logging: LoggingSettings, report_to: list[str]) -> dict[str, Any]:
    """trackio's project, and no Hugging Face Space ever (``trackio_space_id`` stays None: a local database only;
    ``trackio_static_space_id=False``: nothing synced or frozen after training)."""
    if "trackio" not in report_to:
        return {}
    return dict(project=logging.project_name, trackio_space_id=None, trackio_static_space_id=False)


def _vllm_kwargs(hardware: HardwareConfig) -> dict[str, Any]:
    """TRL's vLLM settings from the hardware profile (nothing unless hardware.use_vllm)."""
    if not hardware.use_vllm:
        return {}
    if hardware.vllm_mode == "server":
        return dict(
            vllm_mode="server", vllm_server_host=hardware.vllm_server_host, vllm_server_port=hardware.vllm_server_port
        )
    return dict(
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=hardware.vllm_gpu_memory_utilization,
        vllm_tensor_parallel_size=hardware.vllm_tensor_parallel_size,
    )


@dataclass(frozen=True)
class RunSettings:
    """The run-level keys of conf/config.yaml (groups are typed separately)."""

    seed: Annotated[int, Range(ge=0, le=2**32 - 1)] = 0  # numpy's seeds are 32-bit
    run_name: str = "rlpost"
    resume: str | None = None
    train: TrainSettings = field(default_factory=TrainSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
