"""The hardware plan in plain language, for ``rlpost show``."""

from __future__ import annotations

from typing import Any

from rlpost.launch import deepspeed


def describe_hardware(hardware: Any, plan: Any) -> list[str]:
    """Lines: processes (and how they start), ZeRO stage and offload, vLLM mode, per-process batch."""
    hw, per_process = hardware, plan.completions_per_step // plan.world_size
    backend = "gloo" if hw.device == "cpu" else "nccl"
    if hw.num_processes == 1:
        procs = "1 process (no launcher)"
    else:
        procs = (
            f"{hw.num_processes} processes over {hw.num_machines} machine(s), started by accelerate launch ({backend})"
        )
        if hw.num_machines > 1:
            procs += f"; this is machine {hw.machine_rank}, machine 0 at {hw.main_process_ip}:{hw.main_process_port}"
    if not hw.use_vllm:
        rollouts = "transformers generate in each training process"
    elif hw.vllm_mode == "colocate":
        rollouts = f"vLLM colocated in each training process ({hw.vllm_gpu_memory_utilization:g} of GPU memory)"
    else:
        rollouts = f"vLLM server at {hw.vllm_server_host}:{hw.vllm_server_port} (start it with rlpost serve)"
    return [
        f"  processes               {procs}",
        f"  device                  {hw.device}, {hw.precision}",
        f"  sharding                {deepspeed.describe(hw)}",
        f"  rollouts                {rollouts}",
        f"  per process and step    {per_process} completions = {plan.grad_accum} micro-batch(es) of {plan.micro_batch_size}",
    ]
