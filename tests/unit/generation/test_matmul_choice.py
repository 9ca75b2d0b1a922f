"""train.cpu_matmul=auto: the step estimate, the 5% margin, the per-machine cache (rlpost/generation/matmul_choice.py)."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch

from rlpost.generation import matmul_choice, onednn, skinny_matmul

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this PyTorch build has no oneDNN fp32 matmul")


def test_choose_needs_a_five_percent_margin():
    assert matmul_choice.choose(1.0, 0.95) == "onednn"  # exactly 5% faster: taken
    assert matmul_choice.choose(1.0, 0.96) == "aten"  # 4%: within the noise, TRL's own kernel stays
    assert matmul_choice.choose(1.0, 1.5) == "aten"
    assert matmul_choice.choose(2.0, 0.5) == "onednn"


def test_weight_shapes_counts_fp32_linears_only():
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Linear(8, 4), torch.nn.Linear(4, 8), torch.nn.Linear(8, 8).bfloat16()
    )
    assert matmul_choice.weight_shapes(model) == Counter({(8, 4): 2, (4, 8): 1})  # weights are [out, in]


def test_step_estimate_weights_each_shape_by_its_count(monkeypatch):
    fake = {  # seconds per shape, per backend: training (on train_rows rows) and one decode product
        (8, 4): {"aten_train": 1.0, "onednn_train": 0.5, "aten_decode": 0.1, "onednn_decode": 0.2},
        (4, 8): {"aten_train": 2.0, "onednn_train": 2.0, "aten_decode": 0.3, "onednn_decode": 0.1},
    }
    monkeypatch.setattr(matmul_choice, "_shape_times", lambda n, k, train_rows, decode_rows, kernel: fake[(n, k)])
    timing = matmul_choice.measure(Counter({(8, 4): 2, (4, 8): 1}), step_rows=512, decode_rows=8, decode_steps=10)
    # training scaled by step_rows / train_rows = 512 / 256 = 2; decode times decode_steps = 10:
    # aten   = (2*1.0 + 1*2.0) * 2 + (2*0.1 + 1*0.3) * 10 = 8 + 5 = 13
    # onednn = (2*0.5 + 1*2.0) * 2 + (2*0.2 + 1*0.1) * 10 = 6 + 5 = 11 -> 11 <= 0.95 * 13 = 12.35: oneDNN
    assert timing.aten_s == pytest.approx(13.0) and timing.onednn_s == pytest.approx(11.0)
    assert timing.choice == "onednn" and timing.speedup == pytest.approx(13 / 11)
    # a step that decodes 100 tokens is dominated by decode, where oneDNN is slower here:
    # aten = 8 + 0.5 * 100 = 58, onednn = 6 + 0.5 * 100 = 56 > 0.95 * 58 = 55.1: aten
    assert matmul_choice.measure(Counter({(8, 4): 2, (4, 8): 1}), 512, 8, 100).choice == "aten"


def test_decode_kernel_taken_by_its_own_margin_and_counted_in_the_estimate(monkeypatch):
    fake = {  # as above, plus rlpost's decode kernel
        (8, 4): {
            "aten_train": 1.0,
            "onednn_train": 0.5,
            "aten_decode": 0.1,
            "onednn_decode": 0.2,
            "kernel_decode": 0.1,
        },
        (4, 8): {
            "aten_train": 2.0,
            "onednn_train": 2.0,
            "aten_decode": 0.3,
            "onednn_decode": 0.1,
            "kernel_decode": 0.1,
        },
    }
    monkeypatch.setattr(matmul_choice, "_shape_times", lambda n, k, train_rows, decode_rows, kernel: fake[(n, k)])
    shapes = Counter({(8, 4): 2, (4, 8): 1})
    timing = matmul_choice.measure(shapes, step_rows=512, decode_rows=8, decode_steps=100, kernel=True)
    # decode per step: aten (2*0.1 + 1*0.3) * 100 = 50, oneDNN (2*0.2 + 1*0.1) * 100 = 50,
    # kernel (2*0.1 + 1*0.1) * 100 = 30 <= 0.95 * 50 on both routes: each route decodes through the kernel
    # onednn route = training 6 + kernel decode 30 = 36; aten route = 8 + 30 = 38 -> 36 <= 0.95 * 38 = 36.1: oneDNN
    assert timing.decode == "kernel" and timing.choice == "onednn"
    assert timing.kernel_decode_s == pytest.approx(30.0) and timing.onednn_decode_s == pytest.approx(50.0)
    assert timing.aten_decode_s == pytest.approx(50.0)
    assert timing.onednn_s == pytest.approx(36.0) and timing.aten_s == pytest.approx(38.0)
    # the same step without the kernel: oneDNN's route 6 + 50 = 56 > 0.95 * 58 = 55.1: aten (as above)
    without = matmul_choice.measure(shapes, 512, 8, 100)
    assert without.choice == "aten" and without.decode == "aten" and without.kernel_decode_s is None
    assert without.aten_s == pytest.approx(58.0) and without.onednn_s == pytest.approx(56.0)
    # a kernel only 4% faster at decode than either route's own stays off: 0.192 * 2 + 0.096 = 0.48 per product,
    # x100 = 48 > 0.95 * 50 = 47.5; the routes are then 58 and 56 again: aten, decoding through PyTorch
    fake[(8, 4)]["kernel_decode"], fake[(4, 8)]["kernel_decode"] = 0.192, 0.096
    assert matmul_choice.measure(shapes, 512, 8, 100, kernel=True).decode == "aten"


def test_decode_kernel_taken_on_the_aten_route_where_mkl_wins_the_training_products(monkeypatch):
    """A CPU where oneDNN does not beat MKL's training products (the Intel Xeon of issue 23): the step keeps
    aten, and its decode still goes through the kernel where that is faster than PyTorch's."""
    fake = {
        (8, 4): {
            "aten_train": 1.0,
            "onednn_train": 1.0,
            "aten_decode": 0.2,
            "onednn_decode": 0.2,
            "kernel_decode": 0.1,
        },
        (4, 8): {
            "aten_train": 2.0,
            "onednn_train": 2.0,
            "aten_decode": 0.1,
            "onednn_decode": 0.1,
            "kernel_decode": 0.1,
        },
    }
    monkeypatch.setattr(matmul_choice, "_shape_times", lambda n, k, train_rows, decode_rows, kernel: fake[(n, k)])
    timing = matmul_choice.measure(Counter({(8, 4): 2, (4, 8): 1}), 512, 8, 100, kernel=True)
    # training on both routes (2*1 + 2) * 2 = 8; decode aten = oneDNN = (2*0.2 + 0.1) * 100 = 50,
    # kernel (2*0.1 + 0.1) * 100 = 30 <= 47.5: both routes 8 + 30 = 38 -> 38 > 0.95 * 38: aten, decode kernel
    assert timing.choice == "aten" and timing.decode == "kernel"
    assert timing.aten_s == pytest.approx(38.0) and timing.onednn_s == pytest.approx(38.0)


def test_shape_times_are_real_positive_timings_and_scale_a_sliced_weight(monkeypatch):
    times = matmul_choice._shape_times(64, 32, train_rows=16, decode_rows=4)
    assert set(times) == {"aten_train", "onednn_train", "aten_decode", "onednn_decode"}
    assert all(math.isfinite(v) and v > 0 for v in times.values())
    if skinny_matmul.available():  # the decode kernel, timed on the same product
        with_kernel = matmul_choice._shape_times(64, 32, train_rows=16, decode_rows=4, kernel=True)
        assert math.isfinite(with_kernel["kernel_decode"]) and with_kernel["kernel_decode"] > 0
    sliced = []
    monkeypatch.setattr(matmul_choice, "MAX_COLUMNS", 16)
    monkeypatch.setattr(matmul_choice, "_best_of", lambda fn: sliced.append(fn().shape) or 1.0)
    scaled = matmul_choice._shape_times(64, 32, train_rows=16, decode_rows=4)
    # every product ran on the first 16 of the 64 weight rows, and each time is scaled by 64 / 16 = 4
    assert sliced[0] == (16, 16) and sliced[2] == (16, 32)  # forward [rows, 16 cols]; dW [16 cols, K]
    assert scaled == {"aten_train": 12.0, "onednn_train": 12.0, "aten_decode": 4.0, "onednn_decode": 4.0}


def test_auto_choice_measures_once_per_machine_and_model(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("RLPOST_CACHE", str(tmp_path))
    calls = []

    def fake_measure(shapes, step_rows, decode_rows, decode_steps, kernel=False):
        calls.append(shapes)
        return matmul_choice.MatmulTiming(2.0, 1.0, "onednn", "test cpu")

    monkeypatch.setattr(matmul_choice, "measure", fake_measure)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8))
    with caplog.at_level("INFO", logger="rlpost.generation.matmul_choice"):
        first = matmul_choice.auto_choice(model, step_rows=64, decode_rows=8, decode_steps=8)
        again = matmul_choice.auto_choice(model, step_rows=64, decode_rows=8, decode_steps=8)
    assert first == again and first.choice == "onednn" and len(calls) == 1  # the second read the cache
    assert "measured now" in caplog.records[0].getMessage() and "cached in" in caplog.records[1].getMessage()
    cache = json.loads((tmp_path / "cpu_matmul.json").read_text())
    (key,) = cache
    assert matmul_choice.cpu_name() in key and f"torch {torch.__version__}" in key and "8x4*1" in key
    assert "decode kernel False" in key  # not asked for: the kernel neither timed nor built
    assert cache[key]["choice"] == "onednn" and not list(tmp_path.glob("*.tmp"))  # renamed into place
    matmul_choice.auto_choice(torch.nn.Sequential(torch.nn.Linear(4, 16)), 64, 8, 8)  # another model: timed
    assert len(calls) == 2 and len(json.loads((tmp_path / "cpu_matmul.json").read_text())) == 2
