"""The CUDA path (``gpu`` marker: skipped without a GPU; bench/gpu_suite.sh runs these on a GPU machine).

- The compact log-prob head on CUDA, fp32 and bf16, against plain autograd over the full logits.
- ``rlpost train hardware=gpu`` (bf16 mixed precision, TRL's fused Triton log-prob head under
  ``train.logprob_head=auto``): finite losses and gradients, weights that move, held-out evaluation.
- rlpost reproduces plain TRL on the GPU (fp32, same tolerances as on CPU: 1e-5 with TRL's computation).
- DeepSpeed ZeRO-2 and ZeRO-3 on one GPU (rlpost sets the single-process rendezvous itself).
- SIGKILL between checkpoints, then ``resume=auto``, matches an uninterrupted run (CUDA RNG restored).
- Environment episodes (a frozen worker model on the GPU inside the environment) train and evaluate.
"""

from __future__ import annotations

import importlib.util
import json
import math
import signal

import pytest
import torch

from support.runs import NOT_COMPARED, finish, launch, metrics, run_dirs, wait_for
from support.trainer import make_run, step_logs, train_plain_trl, train_rlpost

pytestmark = pytest.mark.gpu
GPU = ["hardware=gpu", "train.steps=2", "eval.size=8"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compact_head_on_cuda_matches_autograd(dtype):
    from rlpost.logprobs.head import CompletionLogProbs

    torch.manual_seed(0)
    hidden = torch.randn(300, 64, device="cuda", dtype=dtype, requires_grad=True)
    weight = torch.randn(1000, 64, device="cuda", dtype=dtype, requires_grad=True)
    targets = torch.randint(0, 1000, (300,), device="cuda")
    # reference: log_softmax(h W^T / T) over full fp64 logits, gathered at the targets
    log_p = torch.log_softmax(hidden.double() @ weight.double().t() / 0.7, dim=-1)
    ref = log_p.gather(1, targets[:, None]).squeeze(1)
    ref_grad = torch.autograd.grad(ref.sum(), (hidden, weight))
    logps, _ = CompletionLogProbs.apply(hidden, weight, targets, 0.7, 128, False, True, False)  # 3 chunks
    ours = torch.autograd.grad(logps.sum(), (hidden, weight))
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(logps.double(), ref, rtol=tol, atol=tol)
    for a, b in zip(ours, ref_grad):
        torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=tol * 10)


def test_grpo_trains_in_bf16_on_gpu(tmp_path):
    code, _, err = finish(launch(tmp_path, *GPU, "eval.at_end=true", "train.save_steps=2"))
    assert code == 0, err[-4000:]
    (run,) = run_dirs(tmp_path)
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in rows)
    summary = json.loads((run / "summary.json").read_text())
    assert math.isfinite(summary["after"]["eval/reward"]) and summary["after"]["eval/mean_length"] > 0
    assert (run / "checkpoints" / "final" / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("forward", "rel"), [(["train.logprob_head=trl"], 1e-5), (["train.logprob_head=compact"], 1e-4)]
)
def test_matches_plain_trl_on_gpu(forward, rel, tmp_path):
    run = make_run(["hardware=gpu", "hardware.precision=fp32", "train.micro_batch_size=4", *forward])
    plain = train_plain_trl(run, tmp_path / "trl", loss_type="grpo", scale_rewards="group")
    ours = train_rlpost(run, tmp_path / "rlpost")
    assert list(plain._logs["completion"]) == list(ours._logs["completion"]), "different generations"
    plain_logs, our_logs = step_logs(plain), step_logs(ours)
    assert len(plain_logs) == len(our_logs) == 3
    assert any(log["grad_norm"] > 1e-6 for log in plain_logs), "vacuous comparison: no gradient"
    for p, o in zip(plain_logs, our_logs):
        assert math.isclose(p["loss"], o["loss"], rel_tol=rel, abs_tol=1e-8), (p["loss"], o["loss"])
        assert math.isclose(p["grad_norm"], o["grad_norm"], rel_tol=rel, abs_tol=1e-8), (p, o)


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not importable")
@pytest.mark.parametrize("stage", [2, 3])
def test_zero_on_one_gpu(stage, tmp_path):
    code, _, err = finish(
        launch(tmp_path, *GPU, f"hardware=zero{stage}", f"hardware.main_process_port={29650 + stage}")
    )
    assert code == 0, err[-4000:]
    (run,) = run_dirs(tmp_path)
    assert json.loads((run / "deepspeed.json").read_text())["zero_optimization"]["stage"] == stage
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in rows)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "final")  # whole tensors, no DeepSpeed
    assert all(p.numel() > 0 and torch.isfinite(p).all() for p in model.parameters())


def test_sigkill_then_resume_matches_uninterrupted_on_gpu(tmp_path):
    args = ["hardware=gpu", "train.steps=4", "train.save_steps=2", "resume=auto"]
    reference = launch(tmp_path / "a", *args)
    killed = launch(tmp_path / "b", *args)
    wait_for(lambda: any((d / "checkpoints" / "checkpoint-2").is_dir() for d in run_dirs(tmp_path / "b")), killed)
    killed.send_signal(signal.SIGKILL)
    finish(killed)
    code, _, err = finish(launch(tmp_path / "b", *args))
    assert code == 0, err[-3000:]
    assert "from checkpoint-2" in err
    assert finish(reference)[0] == 0
    expected, resumed = metrics(run_dirs(tmp_path / "a")[0]), metrics(run_dirs(tmp_path / "b")[0])
    assert [m["step"] for m in resumed] == [1, 2, 3, 4] == [m["step"] for m in expected]
    for want, got in zip(expected, resumed):
        for key in sorted(k for k, v in want.items() if isinstance(v, (int, float)) and k not in NOT_COMPARED):
            assert math.isclose(got[key], want[key], rel_tol=1e-4, abs_tol=1e-5), (
                want["step"],
                key,
                want[key],
                got[key],
            )


def test_episodes_train_and_evaluate_on_gpu(tmp_path):
    # a frozen worker model on the GPU inside the environment, episodes through TRL's rollout_func, held-out episodes
    worker = ["data/env=frozen_worker", "data.env.worker_model=tiny-random", "data.env.worker_max_new_tokens=4"]
    terms = "reward.terms=[{name: env, weight: 1.0}, {name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"
    code, _, err = finish(launch(tmp_path, *GPU, "eval.at_end=true", *worker, terms))
    assert code == 0, err[-4000:]
    (run,) = run_dirs(tmp_path)
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["env/turns"] == 1.0 and r["env/failures"] == 0 and math.isfinite(r["loss"]) for r in rows)
    after = json.loads((run / "summary.json").read_text())["after"]
    assert after["eval/env/turns"] == 1.0 and math.isfinite(after["eval/reward"])
