"""Hardware cross-checks, called from ``build.check_run`` before any model loads (ConfigError, exit 2).

What each hardware key alone cannot see: ZeRO without the deepspeed package, offload without
ZeRO-3, vLLM without a GPU or the vllm package, multi-node without an address, more processes per
machine than GPUs, a multirun that would need one ``accelerate launch`` per job. Gradient transforms
vs ZeRO are refused by the transforms' own ``check_compatible`` (rlpost/grad/trusted_projection.py),
the batch split over processes by ``config.plan_batch``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from rlpost.core.errors import ConfigError

VLLM_MODES = ("colocate", "server")


def installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def check_hardware(run: Any) -> None:
    hw = run.hardware
    if hw.num_processes < 1 or hw.num_machines < 1:
        raise ConfigError(
            f"hardware.num_processes={hw.num_processes} and hardware.num_machines={hw.num_machines} must be >= 1."
        )
    if hw.zero_stage not in (0, 1, 2, 3):
        raise ConfigError(f"hardware.zero_stage={hw.zero_stage}: valid choices are 0 (no DeepSpeed), 1, 2, 3.")
    if hw.offload != "none" and hw.zero_stage != 3:
        raise ConfigError(
            f"hardware.offload={hw.offload} needs hardware.zero_stage=3 (got {hw.zero_stage}): "
            "use hardware=zero3-offload."
        )
    if hw.zero_stage and not installed("deepspeed"):
        raise ConfigError(
            f"hardware={hw.name} (ZeRO-{hw.zero_stage}) needs DeepSpeed, which is not installed: "
            "pip install 'rlpost[deepspeed]'."
        )
    if hw.use_vllm:
        check_vllm(hw)
    if hw.num_machines > 1:
        if not hw.main_process_ip:
            raise ConfigError(
                f"hardware.num_machines={hw.num_machines} needs hardware.main_process_ip (the address of machine 0)."
            )
        if hw.num_processes % hw.num_machines:
            raise ConfigError(
                f"hardware.num_processes={hw.num_processes} (all machines) does not split over "
                f"hardware.num_machines={hw.num_machines}."
            )
        if not 0 <= hw.machine_rank < hw.num_machines:
            raise ConfigError(f"hardware.machine_rank={hw.machine_rank} must be in 0..{hw.num_machines - 1}.")
    train = run.settings.train
    if train.logprob_head == "compact" and (hw.num_processes > 1 or hw.zero_stage):
        raise ConfigError(
            f"train.logprob_head=compact calls the model outside its distributed wrapper, so it needs one process "
            f"without DeepSpeed (hardware={hw.name}, num_processes={hw.num_processes}); use train.logprob_head=auto."
        )
    if train.cpu_matmul == "onednn":
        from rlpost.generation import onednn

        if hw.device != "cpu" or hw.num_processes > 1 or hw.zero_stage:
            raise ConfigError(
                f"train.cpu_matmul=onednn needs one CPU process without DeepSpeed (hardware={hw.name}, "
                f"device={hw.device}, num_processes={hw.num_processes}); use train.cpu_matmul=auto or aten."
            )
        if not onednn.available():
            raise ConfigError(
                "train.cpu_matmul=onednn: this PyTorch build has no usable oneDNN fp32 matmul "
                "(torch.ops.mkldnn._linear_pointwise); use train.cpu_matmul=auto or aten."
            )
    if train.logprob_chunk < 1:
        raise ConfigError(f"train.logprob_chunk={train.logprob_chunk} must be >= 1 (tokens per LM-head projection).")
    if train.packing_max_tokens < 1:
        raise ConfigError(
            f"train.packing_max_tokens={train.packing_max_tokens} must be >= 1 (tokens in a packed block); "
            "to run padded rows set train.packing=false."
        )
    per_machine = hw.num_processes // hw.num_machines
    if hw.device == "cuda" and torch.cuda.is_available() and per_machine > torch.cuda.device_count():
        raise ConfigError(
            f"hardware.num_processes={hw.num_processes} puts {per_machine} processes on this machine, but only "
            f"{torch.cuda.device_count()} GPU(s) are visible."
        )


def check_vllm(hw: Any) -> None:
    """vLLM rollouts need a CUDA GPU and the vllm package; the mode is TRL's ``vllm_mode``."""
    if hw.vllm_mode not in VLLM_MODES:
        raise ConfigError(f"hardware.vllm_mode={hw.vllm_mode!r}: valid choices are {', '.join(VLLM_MODES)}.")
    if hw.device != "cuda" or not torch.cuda.is_available():
        where = "hardware.device=cpu" if hw.device != "cuda" else "no CUDA GPU is visible"
        raise ConfigError(
            f"hardware={hw.name} samples rollouts with vLLM (hardware.use_vllm=true), which runs only on a CUDA GPU, "
            f"but {where}: use hardware=cpu or gpu (transformers generate), or run on a GPU machine with "
            "pip install 'rlpost[vllm]'."
        )
    if not installed("vllm"):
        raise ConfigError(
            f"hardware={hw.name} samples rollouts with vLLM, which is not installed: pip install 'rlpost[vllm]'."
        )


def check_multirun(hardware: Any) -> None:
    """A multirun launches its jobs through a Hydra launcher; each would need its own accelerate launch."""
    if hardware.num_processes > 1:
        raise ConfigError(
            f"hardware.num_processes={hardware.num_processes} in a multirun (-m): rlpost re-launches a single run "
            "under accelerate, not each job of a sweep. Sweep with hardware.num_processes=1 (hydra/launcher=joblib "
            "runs jobs in parallel), or launch each multi-process run on its own."
        )
