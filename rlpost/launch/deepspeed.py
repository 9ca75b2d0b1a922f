"""The DeepSpeed config of a hardware profile (``hardware.zero_stage > 0``), written to ``<run>/deepspeed.json``.

Precision, ZeRO stage and offload come from the hardware YAML; every batch/optimizer size that
transformers already knows is left as ``"auto"`` so the Trainer fills it from the ``GRPOConfig``
(micro batch, gradient accumulation, clipping), and the two can never disagree. Choices where the
DeepSpeed docs leave it to the user: ``zero_allow_untested_optimizer`` (transformers builds a torch
AdamW, not a DeepSpeed one, so no op is compiled), ``stage3_gather_16bit_weights_on_model_save``
(a ZeRO-3 ``save_model`` writes a whole, ordinary safetensors model that plain transformers loads),
pinned CPU memory for offload. With ZeRO-3 the in-run evaluation gathers the whole parameters on
every process for the duration of the eval (``gathered_parameters``).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

FILE_NAME = "deepspeed.json"


def deepspeed_config(hardware: Any) -> dict[str, Any] | None:
    """The DeepSpeed config dict of ``hardware`` (None when ``hardware.zero_stage == 0``)."""
    stage = int(hardware.zero_stage)
    if stage == 0:
        return None
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": False, "contiguous_gradients": True}
    if stage == 3:
        zero.update(
            stage3_gather_16bit_weights_on_model_save=True,  # save_model writes whole weights
            stage3_param_persistence_threshold="auto",
            stage3_prefetch_bucket_size="auto",
            reduce_bucket_size="auto",
        )
    if hardware.offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": "auto",  # = GRPOConfig.per_device_train_batch_size
        "gradient_accumulation_steps": "auto",  # = GRPOConfig.gradient_accumulation_steps
        "train_batch_size": "auto",  # micro x accumulation x processes
        "gradient_clipping": "auto",  # = train.max_grad_norm
        "bf16": {"enabled": hardware.precision == "bf16"},
        "fp16": {"enabled": hardware.precision == "fp16"},
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,  # transformers' torch AdamW
        "steps_per_print": 1_000_000,  # rlpost logs itself
        "wall_clock_breakdown": False,
    }


def write_deepspeed_config(hardware: Any, run_dir: str | Path) -> Path | None:
    """Write ``<run_dir>/deepspeed.json`` (same content from every process); None without ZeRO."""
    config = deepspeed_config(hardware)
    if config is None:
        return None
    path = Path(run_dir) / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(config, indent=2) + "\n"
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_name(f".{FILE_NAME}.{id(config)}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def describe(hardware: Any) -> str:
    """One line for ``rlpost show``."""
    if not hardware.zero_stage:
        return "no DeepSpeed (plain PyTorch / DDP)"
    what = {1: "optimizer state", 2: "optimizer state and gradients", 3: "optimizer state, gradients and parameters"}
    line = f"DeepSpeed ZeRO-{hardware.zero_stage}: {what[int(hardware.zero_stage)]} sharded over the processes"
    if hardware.offload == "cpu":
        line += "; optimizer state and parameters offloaded to CPU memory"
    return line + f" (config written to <run>/{FILE_NAME})"


def gathered_parameters(hardware: Any, model: Any):
    """A context in which a ZeRO-3 model holds its whole parameters on every process (for generation
    in the in-run evaluation); a no-op otherwise, and for parameters DeepSpeed has not partitioned yet."""
    if int(hardware.zero_stage) != 3:
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None)
