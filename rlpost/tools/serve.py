"""``rlpost serve model=... [hardware=vllm-server]``: TRL's vLLM server for ``vllm_mode=server`` rollouts.

Runs ``python -m trl.scripts.vllm_serve --model <folder>`` (the ``trl vllm-serve`` entry point) with
the host, port, tensor parallelism and GPU memory share of the hardware profile, for the model
group's weights (``rlpost.models.loading.model_folder``: the converted SmolLM2 folder, the tiny model or
``model.path``). Then ``rlpost train hardware=vllm-server`` on the other GPU(s) reaches it at
``hardware.vllm_server_host:vllm_server_port``. The checks run first, so on a CPU machine or
without vllm it fails fast with the install hint (exit 2); vllm itself is never imported here.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

from rlpost.app import fail, validate
from rlpost.core.errors import ConfigError


def serve_command(model_folder: str, hardware) -> list[str]:
    """The vLLM server command line for ``model_folder`` with the profile's settings."""
    return [
        sys.executable,
        "-m",
        "trl.scripts.vllm_serve",
        "--model",
        str(model_folder),
        "--host",
        str(hardware.vllm_server_host),
        "--port",
        str(hardware.vllm_server_port),
        "--tensor_parallel_size",
        str(hardware.vllm_tensor_parallel_size),
        "--gpu_memory_utilization",
        str(hardware.vllm_gpu_memory_utilization),
    ]


def build_server(cfg, overrides: list[str]):
    """The composed config -> (hardware profile, model config), checked for vLLM (no model loads)."""
    from rlpost.core.config import HardwareConfig
    from rlpost.core.schema import build_config, to_container
    from rlpost.launch.checks import check_vllm
    from rlpost.models.loading import ModelConfig

    hardware = build_config(HardwareConfig, to_container(cfg.hardware), "hardware")
    model = build_config(ModelConfig, to_container(cfg.model), "model")
    check_vllm(hardware)
    return hardware, model


def main(args: list[str]) -> int:
    """Composed and checked once through the launch path (rlpost/app.py), then the server runs in the
    foreground (no Hydra run directory)."""
    from rlpost.models.loading import model_folder

    overrides = args if any(a.startswith("hardware=") for a in args) else ["hardware=vllm-server", *args]
    try:
        (job,) = validate(overrides, multirun=False, build=build_server)
    except ConfigError as err:
        return fail(str(err))
    hardware, model = job.built
    cmd = serve_command(str(model_folder(model)), hardware)
    print(f"rlpost: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    return subprocess.call(cmd)
