"""train.decode_kernel: rlpost's compiled decode kernel (rlpost/generation/skinny_matmul.py) packs, multiplies like
F.linear to float rounding, takes over a model's decode products on either matmul route, and steps aside
where it cannot."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from rlpost.generation import matmul_choice, onednn, skinny_matmul
from rlpost.models.loading import load_model
from rlpost.trainer import logprobs

from support.trainer import make_run, rlpost_trainer

pytestmark = pytest.mark.skipif(
    not (onednn.available() and skinny_matmul.available()),
    reason=f"the decode kernel cannot run here: {skinny_matmul.unavailable_reason()}",
)


def _block() -> int:
    return skinny_matmul._extension().block()


@pytest.mark.parametrize("k", [5, 67], ids=["k-below-one-8x8-tile", "k-8x8-tiles-past-one-64-column-tile-and-a-tail"])
def test_pack_lays_each_block_k_major_and_pads_the_last_with_zeros(k):
    block = _block()
    n = 2 * block + 3
    weight = torch.arange(n * k, dtype=torch.float32).reshape(n, k)
    packed = skinny_matmul.pack(weight)
    assert packed.shape == (3, k, block)  # ceil(n / block) blocks of [K, BLOCK]
    for b, i, j in [(0, 0, 0), (0, 4, block - 1), (1, 2, 7), (2, 3, 2)]:
        assert packed[b, i, j] == weight[b * block + j, i]  # packed[b, k, j] = W[b * BLOCK + j, k]
    assert packed[2, :, 3:].abs().sum() == 0  # the last block's rows beyond n are zeros
    # every element: packed[b, i, j] = W[b * BLOCK + j, i], the zero rows appended to W
    padded = torch.cat([weight, torch.zeros(3 * block - n, k)])
    assert torch.equal(packed, padded.view(3, block, k).transpose(1, 2))


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 9, 13, 16])
def test_product_equals_f_linear_at_every_row_count(rows):
    """Both register layouts (up to 8 rows; 9-16 as 8 + the rest) and a partial last block, with a bias,
    against a float64 reference: the kernel sums over k in order, so it agrees to fp32 rounding."""
    gen = torch.Generator().manual_seed(rows)
    n, k = 3 * _block() + 7, 67
    weight, bias = torch.randn(n, k, generator=gen), torch.randn(n, generator=gen)
    x = torch.randn(rows, k, generator=gen)
    out = skinny_matmul.linear(x, skinny_matmul.pack(weight), n, bias)
    reference = F.linear(x.double(), weight.double(), bias.double())
    assert out.dtype == torch.float32 and out.shape == (rows, n)
    torch.testing.assert_close(out.double(), reference, rtol=0, atol=1e-4)
    # [batch, seq, K] inputs keep their leading dimensions
    x3 = x.reshape(1, rows, k)
    torch.testing.assert_close(skinny_matmul.linear(x3, skinny_matmul.pack(weight), n), F.linear(x3, weight))


def test_more_rows_than_the_kernel_takes_are_refused():
    weight = torch.randn(20, 8)
    with pytest.raises(RuntimeError, match="1 to 16 rows, got 17"):
        skinny_matmul.linear(torch.randn(17, 8), skinny_matmul.pack(weight), 20)


def _tiny_model(routed: bool):
    model = load_model(make_run([]).model)
    if routed:
        onednn.use_onednn_linears(model)
    return model


@pytest.mark.parametrize("routed", [True, False], ids=["onednn-route", "aten-route"])
def test_decode_weights_route_decode_rows_to_the_kernel_and_the_prefill_to_the_layers_own_forward(monkeypatch, routed):
    model = _tiny_model(routed)
    calls = []
    real = skinny_matmul.linear
    monkeypatch.setattr(skinny_matmul, "linear", lambda x, *a, **kw: calls.append(x.shape) or real(x, *a, **kw))
    gen = torch.Generator().manual_seed(0)
    prefill, decode = torch.randint(0, 1000, (1, 20), generator=gen), torch.randint(0, 1000, (4, 1), generator=gen)
    with torch.no_grad():
        reference = [model(input_ids=ids).logits for ids in (prefill, decode)]
        with skinny_matmul.decode_weights(model) as swapped:
            assert len(swapped) == sum(type(m) is torch.nn.Linear for m in model.modules())
            long_out = model(input_ids=prefill).logits  # 20 rows > 16: the layer's own (oneDNN or PyTorch)
            assert calls == []
            short_out = model(input_ids=decode).logits  # 4 rows: every linear through the kernel
            assert len(calls) == len(swapped) and all(shape[:-1] == (4, 1) for shape in calls)
    torch.testing.assert_close(long_out, reference[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(short_out, reference[1], rtol=1e-4, atol=1e-4)
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    if routed:  # the routed forward is back
        assert all(m.forward.func is onednn._forward for m in linears)
    else:  # nn.Linear's own forward, no instance attribute left behind
        assert all("forward" not in m.__dict__ for m in linears)


def _lm_head_forward(trainer, rows: int):
    """The policy head's forward inside the trainer's generation context for ``rows`` rows."""
    with trainer._generation_context(rows):
        forward = trainer.accelerator.unwrap_model(trainer.model).lm_head.forward
        return getattr(forward, "func", getattr(forward, "__func__", forward))


def test_trainer_takes_the_kernel_when_asked_or_measured_faster(tmp_path, monkeypatch):
    forced = rlpost_trainer(make_run(["train.cpu_matmul=onednn"]), tmp_path / "a")
    assert forced._onednn and forced._decode_kernel  # train.decode_kernel=true by default
    off = rlpost_trainer(make_run(["train.cpu_matmul=onednn", "train.decode_kernel=false"]), tmp_path / "b")
    assert off._onednn and not off._decode_kernel
    aten = rlpost_trainer(make_run(["train.cpu_matmul=aten"]), tmp_path / "d")
    assert not aten._onednn and not aten._decode_kernel  # PyTorch's matmuls everywhere, decode included
    monkeypatch.setenv("RLPOST_CACHE", str(tmp_path / "cache"))
    auto = rlpost_trainer(make_run([]), tmp_path / "c")  # timed: the kernel's decode against each route's own
    timing = auto.matmul_timing
    assert timing is not None and timing.kernel_decode_s is not None and timing.kernel_decode_s > 0
    assert timing.aten_decode_s is not None and timing.onednn_decode_s is not None
    # either route may win the training products on this machine; the kernel follows its own timing on both
    assert auto._onednn == (timing.choice == "onednn")
    assert auto._decode_kernel == (timing.decode == "kernel")
    (key,) = json.loads((tmp_path / "cache" / "cpu_matmul.json").read_text())
    assert "decode kernel True" in key


def test_generation_packs_for_the_kernel_on_either_route_and_for_onednn_otherwise(tmp_path, monkeypatch):
    forced = rlpost_trainer(make_run(["train.cpu_matmul=onednn"]), tmp_path / "a")
    assert _lm_head_forward(forced, 4) is skinny_matmul._forward
    assert _lm_head_forward(forced, skinny_matmul.MAX_ROWS + 1) is onednn._packed_forward  # above its rows
    off = rlpost_trainer(make_run(["train.cpu_matmul=onednn", "train.decode_kernel=false"]), tmp_path / "b")
    assert _lm_head_forward(off, 4) is onednn._packed_forward
    # auto kept aten for the training products (as on the Intel Xeon of issue 23) and timed the kernel faster
    # at decode: generation packs for the kernel, with PyTorch's own linear for the prefill
    timing = matmul_choice.MatmulTiming(1.0, 1.0, "aten", "test cpu", decode="kernel")
    monkeypatch.setattr(logprobs, "auto_choice", lambda *args, **kwargs: timing)
    aten_route = rlpost_trainer(make_run([]), tmp_path / "c")
    assert not aten_route._onednn and aten_route._decode_kernel
    assert _lm_head_forward(aten_route, 4) is skinny_matmul._forward
    assert _lm_head_forward(aten_route, skinny_matmul.MAX_ROWS + 1) is torch.nn.Linear.forward  # nothing packed
    # asked for, but it cannot run here: oneDNN's packed weights on that route, PyTorch's on the other
    monkeypatch.setattr(skinny_matmul, "_load", lambda: (None, "no C++ compiler (c++) on PATH"))
    assert not skinny_matmul.available() and "no C++ compiler" in skinny_matmul.unavailable_reason()
    assert _lm_head_forward(forced, 4) is onednn._packed_forward
    assert _lm_head_forward(aten_route, 4) is torch.nn.Linear.forward


def test_a_build_lock_left_by_a_killed_build_does_not_hang_the_next_process():
    # PyTorch's build lock is a plain file (<build>/lock): a process killed while compiling leaves it, and the next
    # one used to wait on it forever (a full test run hung at collection). The OS lock around the build lets the next
    # process remove it and load the extension.
    import os
    import subprocess
    import sys

    from filelock import FileLock

    from support.paths import REPO

    baton = skinny_matmul.build_dir() / "lock"
    with FileLock(str(baton.parent / "rlpost.lock")):  # no other process is inside a build while the baton appears
        baton.write_text("")
    code = "from rlpost.generation import skinny_matmul; print(skinny_matmul.unavailable_reason())"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "None", out.stderr[-2000:]
    assert not baton.exists()  # removed by this process, or by another that built first (the suite runs in parallel)
