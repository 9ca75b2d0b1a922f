"""Scale-out config (rlpost/launch/): the generated DeepSpeed config, the accelerate launch command,
the vLLM settings handed to TRL, ``rlpost show``'s hardware plan, and every hardware cross-check
failing before any model loads (exit 2, a message naming the keys). No GPU, vLLM or second process
is needed; the real multi-process runs are in test_scale_runs.py.
"""

from __future__ import annotations

import pytest
import torch

from rlpost import app, cli
from rlpost.core.config import HardwareConfig, grpo_config_kwargs
from rlpost.launch import accelerate, checks
from rlpost.launch.deepspeed import deepspeed_config, write_deepspeed_config
from rlpost.tools.serve import serve_command

from support.trainer import HASH_REWARD, TINY, make_run

CPU = ["hardware.device=cpu", "hardware.precision=fp32"]


@pytest.fixture
def no_launch(monkeypatch, tmp_path):
    """Hydra's launcher and accelerate's re-launch replaced by tripwires: bad input must never reach them."""
    import hydra

    def tripwire(*args, **kwargs):
        raise AssertionError("validation passed: the job was launched")

    monkeypatch.setattr(hydra, "main", tripwire)
    monkeypatch.setattr(accelerate, "relaunch", tripwire)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(accelerate.MARKER, raising=False)
    return tmp_path


def fails(capsys, argv: list[str], *expected: str) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, err
    return err


def train(*overrides: str) -> list[str]:
    return ["train", *TINY, HASH_REWARD, *overrides]


# ---- the DeepSpeed config -------------------------------------------------------------------------
def test_deepspeed_config_per_stage(tmp_path):
    assert deepspeed_config(HardwareConfig()) is None and write_deepspeed_config(HardwareConfig(), tmp_path) is None
    z2 = deepspeed_config(HardwareConfig(zero_stage=2, precision="bf16"))
    assert z2["zero_optimization"]["stage"] == 2 and "offload_param" not in z2["zero_optimization"]
    assert z2["bf16"] == {"enabled": True} and z2["fp16"] == {"enabled": False}
    for key in (
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "train_batch_size",
        "gradient_clipping",
    ):
        assert z2[key] == "auto"  # filled by transformers from the GRPOConfig
    z3 = deepspeed_config(HardwareConfig(zero_stage=3, offload="cpu"))
    assert z3["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert (
        z3["zero_optimization"]["offload_optimizer"]["device"]
        == "cpu"
        == z3["zero_optimization"]["offload_param"]["device"]
    )
    assert z3["bf16"] == {"enabled": False}
    path = write_deepspeed_config(HardwareConfig(zero_stage=3), tmp_path)
    assert path == tmp_path / "deepspeed.json" and '"stage": 3' in path.read_text()


@pytest.mark.skipif(
    not checks.installed("deepspeed"), reason="deepspeed is not importable: pip install 'rlpost[deepspeed]'"
)
def test_zero_profile_passes_deepspeed_to_trl(tmp_path):
    from trl import GRPOConfig

    run = make_run(["hardware=zero2", *CPU, "hardware.num_processes=2"])
    kwargs = run.grpo_config_kwargs(str(tmp_path))
    assert kwargs["deepspeed"]["zero_optimization"]["stage"] == 2
    assert (kwargs["per_device_train_batch_size"], kwargs["gradient_accumulation_steps"]) == (4, 1)  # 8 over 2
    assert make_run(["hardware=cpu"]).grpo_config_kwargs(str(tmp_path)).get("deepspeed") is None
    args = GRPOConfig(**kwargs)  # transformers accepts the generated config
    assert args.hf_deepspeed_config.config["train_micro_batch_size_per_gpu"] == 4


def test_vllm_settings_reach_trl(tmp_path):
    run = make_run([])
    kw = dict(seed=0, output_dir=str(tmp_path), beta=0.0, mask_truncated=False)
    args = (run.settings.train, run.settings.logging)
    server = grpo_config_kwargs(
        *args, HardwareConfig(use_vllm=True, vllm_mode="server", vllm_server_port=8123), run.plan, **kw
    )
    assert (server["use_vllm"], server["vllm_mode"], server["vllm_server_port"]) == (True, "server", 8123)
    colocate = grpo_config_kwargs(*args, HardwareConfig(use_vllm=True, vllm_gpu_memory_utilization=0.5), run.plan, **kw)
    assert (colocate["vllm_mode"], colocate["vllm_gpu_memory_utilization"]) == ("colocate", 0.5)
    assert "vllm_mode" not in grpo_config_kwargs(*args, HardwareConfig(), run.plan, **kw)


# ---- launch commands ------------------------------------------------------------------------------
def test_launch_command_single_and_multi_node(monkeypatch):
    cmd = accelerate.launch_command(HardwareConfig(num_processes=2), ["model=tiny-random"])
    assert cmd[1:4] == ["-m", "accelerate.commands.launch", "--multi_gpu"]
    assert cmd[cmd.index("--num_processes") + 1] == "2" and "--main_process_ip" not in cmd
    assert cmd[-4:] == ["-m", "rlpost.cli", "train", "model=tiny-random"]
    multi = HardwareConfig(device="cuda", num_processes=16, num_machines=2, machine_rank=1, main_process_ip="10.0.0.1")
    cmd = accelerate.launch_command(multi, [])
    for flag, value in (("--num_machines", "2"), ("--machine_rank", "1"), ("--main_process_ip", "10.0.0.1")):
        assert cmd[cmd.index(flag) + 1] == value
    monkeypatch.delenv(accelerate.MARKER, raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert accelerate.should_relaunch(HardwareConfig(num_processes=2))
    assert not accelerate.should_relaunch(HardwareConfig(num_processes=1))
    monkeypatch.setenv(accelerate.MARKER, "1")  # a launched child never launches again
    assert not accelerate.should_relaunch(HardwareConfig(num_processes=2))


def test_serve_command():
    cmd = serve_command("/models/m", HardwareConfig(vllm_server_port=8123, vllm_tensor_parallel_size=2))
    assert cmd[1:5] == ["-m", "trl.scripts.vllm_serve", "--model", "/models/m"]
    assert cmd[cmd.index("--port") + 1] == "8123" and cmd[cmd.index("--tensor_parallel_size") + 1] == "2"


def test_train_with_processes_relaunches(no_launch, monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(accelerate, "relaunch", lambda hw, overrides: seen.update(hw=hw, overrides=overrides) or 0)
    assert cli.main(train("hardware.num_processes=2")) == 0
    assert seen["hw"].num_processes == 2 and "model=tiny-random" in seen["overrides"]


def test_show_explains_hardware(capsys):
    assert cli.main(["show", *TINY, "hardware.num_processes=2"]) == 0
    out = capsys.readouterr().out
    assert "2 processes over 1 machine(s), started by accelerate launch (gloo)" in out
    assert "no DeepSpeed" in out and "4 completions = 1 micro-batch(es) of 4" in out


# ---- cross-checks (exit 2 before any model loads) -------------------------------------------------
@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            ["algorithm/grad=[trusted_projection]", "hardware=zero2", *CPU],
            ["trusted_projection", "hardware=zero2", "ZeRO"],
        ),
        (["algorithm/grad=[direction_monitor]", "hardware=zero3", *CPU], ["direction_monitor", "hardware=zero3"]),
        (["hardware=vllm-colocate"], ["vLLM", "CUDA GPU", "rlpost[vllm]"]),
        (["hardware=vllm-server", "hardware.device=cpu"], ["hardware.device=cpu", "rlpost[vllm]"]),
        (["hardware.num_processes=3"], ["train.completions_per_step=8", "3 processes (hardware.num_processes)"]),
        (["hardware.num_processes=2", "train.micro_batch_size=3"], ["train.micro_batch_size=3", "over 2 processes"]),
        (["hardware=zero2", *CPU, "hardware.offload=cpu"], ["hardware.offload=cpu", "zero_stage=3", "zero3-offload"]),
        (["hardware.zero_stage=4"], ["hardware.zero_stage=4", "0 (no DeepSpeed), 1, 2, 3"]),
        (["hardware=multi-node"], ["hardware.main_process_ip"]),
        (["hardware=multi-node", "hardware.main_process_ip=10.0.0.1", "hardware.num_processes=3"], ["does not split"]),
        (["hardware.vllm_mode=remote", "hardware.use_vllm=true"], ["hardware.vllm_mode"]),
        (["algorithm=ppo", *CPU, "hardware=zero2", "hardware.zero_stage=3"], ["algorithm.critic", "ZeRO-3"]),
    ],
    ids=[
        "trusted-projection-zero2",
        "direction-monitor-zero3",
        "vllm-on-cpu-machine",
        "vllm-device-cpu",
        "processes-vs-batch",
        "micro-batch-vs-processes",
        "offload-without-zero3",
        "bad-zero-stage",
        "multi-node-no-ip",
        "multi-node-split",
        "bad-vllm-mode",
        "ppo-critic-zero3",
    ],
)
def test_hardware_cross_checks(no_launch, capsys, overrides, expected):
    if any("zero" in o for o in overrides) and "zero_stage=4" not in overrides[0] and not checks.installed("deepspeed"):
        pytest.skip("deepspeed is not importable (the missing-package error is tested separately)")
    fails(capsys, train(*overrides), *expected)


def test_deepspeed_missing_names_the_extra(no_launch, capsys, monkeypatch):
    monkeypatch.setattr(checks, "installed", lambda package: package != "deepspeed")
    fails(capsys, train("hardware=zero2", *CPU), "hardware=zero2", "pip install 'rlpost[deepspeed]'")


def test_vllm_missing_names_the_extra(no_launch, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine without vllm
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(checks, "installed", lambda package: package != "vllm")
    fails(capsys, train("hardware=vllm-colocate"), "vLLM, which is not installed", "pip install 'rlpost[vllm]'")


def test_more_processes_than_gpus(no_launch, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    fails(capsys, train("hardware=gpu", "hardware.num_processes=4"), "4 processes on this machine", "2 GPU(s)")


def test_multirun_with_processes_is_refused(no_launch, capsys):
    fails(capsys, [*train("hardware.num_processes=2", "seed=0,1"), "-m"], "multirun", "hardware.num_processes=2")


def test_serve_fails_fast_on_cpu(no_launch, capsys):
    fails(capsys, ["serve", "model=tiny-random"], "CUDA GPU", "pip install 'rlpost[vllm]'")


def test_sweep_launcher_configs():
    """hydra/launcher=local (joblib) and hydra/launcher=slurm (submitit) resolve to the plugins' launchers."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(app.CONF_DIR), version_base=None):
        local = compose(config_name="config", overrides=["hydra/launcher=local"], return_hydra_config=True)
        search = compose(config_name="config", overrides=["hydra/sweeper=search"], return_hydra_config=True)
        slurm = compose(
            config_name="config",
            overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
            return_hydra_config=True,
        )
    assert local.hydra.launcher._target_.endswith("JoblibLauncher") and local.hydra.launcher.n_jobs == 2
    assert slurm.hydra.launcher._target_.endswith("SlurmLauncher")
    assert search.hydra.sweeper._target_.endswith("OptunaSweeper") and search.hydra.sweeper.direction == "maximize"
    assert (slurm.hydra.launcher.partition, slurm.hydra.launcher.timeout_min, slurm.hydra.launcher.tasks_per_node) == (
        "gpu",
        120,
        1,
    )
    from omegaconf import OmegaConf

    assert OmegaConf.to_container(slurm.hydra.sweep)["subdir"] == "${hydra:job.num}"  # each job its own run directory


def test_search_space_is_validated_at_its_lower_end():
    jobs = app.expand_sweep(["train.learning_rate=interval(1e-4,1e-2)", "train.steps=int(interval(2,5))", "seed=0,1"])
    assert jobs == [
        ["train.learning_rate=0.0001", "train.steps=2", "seed=0"],
        ["train.learning_rate=0.0001", "train.steps=2", "seed=1"],
    ]
