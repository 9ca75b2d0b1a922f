"""Fake FP8 (rlpost/models/fake_fp8.py): e4m3 rounding with one scale per row, worked by hand, and the W8A8
copy of a tiny model (weights rounded, inputs rounded by a hook, the output head left alone)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from rlpost.models.fake_fp8 import fake_fp8, fp8_linears, quantize_linears, round_weights
from rlpost.models.loading import ModelConfig, tiny_random_folder


def test_e4m3_rounding_with_a_row_scale_by_hand():
    # e4m3: 3 mantissa bits, so between 2^e and 2^(e+1) the step is 2^e / 8; subnormals below 2^-6 step 2^-9;
    # ties go to the even mantissa. Each row's scale is s = amax / 448, so amax lands on 448 exactly.
    x = torch.tensor(
        [
            [3.5, 1.0, -0.3, 0.0],  # s = 3.5 / 448 = 1/128: x/s = 448, 128, -38.4, 0
            [448.0, 1.0625, 0.01, -17.0],  # s = 1: x itself
            [0.0, 0.0, 0.0, 0.0],  # no magnitude: s = 1, zeros stay zeros
        ]
    )
    expected = torch.tensor(
        [
            # 448 and 128 = 2^7 are exact; 38.4 lies in [32, 64), step 4: 36 or 40, nearer 40 -> -40/128 = -0.3125
            [3.5, 1.0, -0.3125, 0.0],
            # 1.0625 is the midpoint of 1.0 (mantissa 000) and 1.125 (001): even -> 1.0;
            # 0.01 is subnormal: 0.01 / 2^-9 = 5.12 -> 5 * 2^-9 = 0.009765625;
            # 17 is the midpoint of 16 (1.000 x 2^4) and 18 (1.001 x 2^4): even -> 16
            [448.0, 1.0, 0.009765625, -16.0],
            [0.0, 0.0, 0.0, 0.0],
        ]
    )
    assert torch.equal(fake_fp8(x), expected)
    assert torch.equal(fake_fp8(x.to(torch.bfloat16)), expected.to(torch.bfloat16))  # back to the input's dtype
    assert torch.equal(fake_fp8(expected), expected)  # the amax stays on 448: rounding twice changes nothing


def test_quantize_linears_rounds_weights_and_inputs_but_not_the_head():
    model = AutoModelForCausalLM.from_pretrained(tiny_random_folder(ModelConfig(source="tiny_random"))).eval()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    layers = fp8_linears(model)
    head = model.get_output_embeddings()
    assert head not in layers and len(layers) == quantize_linears(model) > 0
    for name, p in model.named_parameters():
        layer_weight = any(p is layer.weight for layer in layers)
        if layer_weight:  # every Linear weight [out, in] rounded with one scale per output row
            assert torch.equal(p, fake_fp8(before[name])) and not torch.equal(p, before[name])
        else:  # embeddings (tied to the head), norms
            assert torch.equal(p, before[name])
    layer = layers[0]
    x = torch.randn(2, 3, layer.in_features)
    with torch.no_grad():  # the hook rounds the input, one scale per token, before the rounded weight applies
        assert torch.equal(layer(x), torch.nn.functional.linear(fake_fp8(x), layer.weight, layer.bias))
        assert not torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        # a sync loads unrounded weights again; round_weights rounds them without adding a second hook
        layer.weight.copy_(before[next(n for n, p in model.named_parameters() if p is layer.weight)])
    assert round_weights(model) == len(layers)
    assert len(layer._forward_pre_hooks) == 1
    assert torch.equal(layer(x), torch.nn.functional.linear(fake_fp8(x), fake_fp8(layer.weight), layer.bias))
