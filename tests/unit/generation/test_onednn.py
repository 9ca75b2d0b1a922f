"""train.cpu_matmul: fp32 linears through oneDNN give PyTorch's numbers to float rounding, both ways."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rlpost.generation import onednn
from rlpost.logprobs.head import CompletionLogProbs
from rlpost.models.loading import load_model

from support.trainer import make_run, rlpost_trainer

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this PyTorch build has no oneDNN fp32 matmul")


def _close(ours, reference, scale=1e-5):
    torch.testing.assert_close(ours, reference, rtol=1e-4, atol=scale * reference.abs().max().item())


@pytest.mark.parametrize("bias", [True, False])
def test_linear_and_its_gradients_equal_torch(bias):
    torch.manual_seed(0)
    x = torch.randn(2, 7, 24, requires_grad=True)  # [B, T, K]: flattened to [14, 24] inside
    w = torch.randn(40, 24, requires_grad=True)
    b = torch.randn(40, requires_grad=True) if bias else None
    g = torch.randn(2, 7, 40)
    inputs = [x, w] + ([b] if bias else [])
    reference = torch.autograd.grad((F.linear(x, w, b) * g).sum(), inputs)
    out = onednn.linear(x, w, b)
    ours = torch.autograd.grad((out * g).sum(), inputs)
    _close(out, F.linear(x, w, b))
    assert out.shape == (2, 7, 40) and out.grad_fn.name().endswith("OneDNNLinearBackward")
    for a, r in zip(ours, reference):
        _close(a, r)


def test_other_dtypes_keep_torchs_linear():
    x, w = torch.randn(3, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
    assert torch.equal(onednn.linear(x, w), F.linear(x, w))


def test_frozen_weight_gets_no_gradient_computed():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(5, 8)
    onednn.linear(x, w).sum().backward()
    _close(x.grad, w.sum(0).expand(4, 8).contiguous())  # d/dx sum(x W^T) = column sums of W
    assert w.grad is None


def test_model_routed_packed_and_restored():
    """Every nn.Linear of the tiny model is routed; logits and every gradient match PyTorch's; inside
    packed_weights the forwards use packed copies and agree; on exit the routed forward is back."""
    model = load_model(make_run([]).model)
    ids = torch.randint(0, 1000, (3, 9))

    def logits_and_grads():
        model.zero_grad()
        logits = model(input_ids=ids).logits
        logits.pow(2).mean().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    reference, reference_grads = logits_and_grads()
    linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert onednn.use_onednn_linears(model) == linears > 5
    ours, grads = logits_and_grads()
    _close(ours, reference)
    for name, r in reference_grads.items():
        _close(grads[name], r, 1e-4)
    with torch.no_grad(), onednn.packed_weights(model, rows=3) as swapped:
        assert swapped == linears
        _close(model(input_ids=ids).logits, reference)
    assert all(m.forward.func is onednn._forward for m in model.modules() if type(m) is torch.nn.Linear)


def test_compact_head_through_onednn_equals_autograd():
    torch.manual_seed(0)
    hidden, weight = torch.randn(6, 16, requires_grad=True), torch.randn(50, 16, requires_grad=True)
    targets = torch.tensor([0, 49, 3, 3, 7, 1])
    log_p = torch.log_softmax(hidden @ weight.t() / 0.7, dim=-1)  # the reference: full logits, fp32 autograd
    reference = log_p.gather(1, targets[:, None]).squeeze(1)
    ref_grads = torch.autograd.grad(reference.sum(), (hidden, weight))
    logps, _ = CompletionLogProbs.apply(hidden, weight, targets, 0.7, 4, False, False, True)  # chunks 4 + 2
    _close(logps, reference)
    for a, r in zip(torch.autograd.grad(logps.sum(), (hidden, weight)), ref_grads):
        _close(a, r)


def test_trainer_routes_when_asked_or_measured_faster_and_refusals(tmp_path):
    from rlpost.core.errors import ConfigError
    from rlpost.launch.checks import check_hardware

    routed = rlpost_trainer(make_run(["train.cpu_matmul=onednn"]), tmp_path / "a")
    assert routed._onednn and "forward" in routed.model.lm_head.__dict__
    assert routed.matmul_timing is None  # forced: nothing timed
    auto = rlpost_trainer(
        make_run([]), tmp_path / "c"
    )  # the default: by measurement (rlpost/generation/matmul_choice.py)
    timing = auto.matmul_timing
    assert timing is not None and timing.aten_s > 0 and timing.onednn_s > 0
    assert auto._onednn == (timing.choice == "onednn") == ("forward" in auto.model.lm_head.__dict__)
    plain = rlpost_trainer(make_run(["train.cpu_matmul=aten"]), tmp_path / "b")
    assert not plain._onednn and "forward" not in plain.model.lm_head.__dict__
    with pytest.raises(ConfigError, match="train.cpu_matmul=onednn needs one CPU process"):
        check_hardware(make_run(["train.cpu_matmul=onednn", "hardware.num_processes=2"]))
    with pytest.raises(ConfigError, match="cpu_matmul"):  # not a choice
        make_run(["train.cpu_matmul=mkl"])
