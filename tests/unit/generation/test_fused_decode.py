"""train.fused_decode: a decode step of a Llama-style model as one C++ call per decoder layer
(rlpost/generation/fused_decode.py + decode_layer.cpp) gives HF's logits to float rounding and the same samples, takes
only the calls it can, and leaves the model as it found it."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlpost.generation import fused_decode, skinny_matmul
from rlpost.generation.kv_cache import PreallocatedCache, preallocated_generation
from rlpost.generation.prefix_generation import shared_prefix_generation
from rlpost.models.loading import load_model

from support.trainer import grouped_prompts, make_run, rlpost_trainer

pytestmark = pytest.mark.skipif(
    not skinny_matmul.available(), reason=f"the decode kernel cannot run here: {skinny_matmul.unavailable_reason()}"
)

SIZES = dict(
    vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=1,
)  # fmt: skip


def _model(kind: str) -> torch.nn.Module:
    """A random fp32 model with grouped-query attention (4 query heads over 2 key/value heads, head_dim 16);
    qwen2 adds biases to the q, k and v products; llama-bias puts a bias on all four attention products."""
    torch.manual_seed(0)
    if kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**SIZES))
    else:
        model = LlamaForCausalLM(LlamaConfig(**SIZES, attention_bias=kind == "llama-bias"))
    for name, parameter in model.named_parameters():  # non-trivial norms and biases (HF initialises 1 and 0)
        if "norm" in name or name.endswith("bias"):
            parameter.data.uniform_(0.5, 1.5) if "norm" in name else parameter.data.normal_(0, 0.5)
    return model.eval()


def _prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """3 left-padded prompts of 5, 3 and 6 tokens: [3, 6] ids and mask."""
    ids = torch.tensor([[0, 5, 6, 7, 8, 9], [0, 0, 0, 10, 11, 12], [13, 14, 15, 16, 17, 18]])
    return ids, (ids != 0).long()


def _generate(model, ids, mask, fused: bool, **sample):
    """``model.generate`` under rlpost's preallocated cache and decode kernel, fused or not."""
    with preallocated_generation(model), skinny_matmul.decode_weights(model) as packed:
        with fused_decode.fused_decoding(model, packed) if fused else nullcontext() as taken:
            assert taken is not False
            torch.manual_seed(3)
            return model.generate(input_ids=ids, attention_mask=mask, pad_token_id=0, max_new_tokens=8,
                                  output_logits=True, return_dict_in_generate=True, **sample)  # fmt: skip


@pytest.fixture
def layer_calls(monkeypatch) -> list[int]:
    """Rows of every ``decoder_layer`` call, recorded."""
    extension, calls = skinny_matmul._extension(), []
    real = extension.decoder_layer

    def spy(hidden, *args):
        calls.append(hidden.size(0))
        return real(hidden, *args)

    monkeypatch.setattr(extension, "decoder_layer", spy)
    return calls


@pytest.mark.parametrize("kind", ["llama", "llama-bias", "qwen2"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_fused_steps_give_hfs_logits_and_tokens(kind, sampled, layer_calls):
    model = _model(kind)
    ids, mask = _prompts()
    sample = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sampled else dict(do_sample=False)
    with torch.no_grad():
        reference = _generate(model, ids, mask, False, **sample)
        assert layer_calls == []
        ours = _generate(model, ids, mask, True, **sample)
    # every decode step after the prefill (7 of the 8 tokens) ran fused, one call per layer of all 3 rows
    assert layer_calls == [3] * (7 * 2)
    assert torch.equal(ours.sequences, reference.sequences)
    for step_ours, step_ref in zip(ours.logits, reference.logits, strict=True):  # [3, vocab] per step
        torch.testing.assert_close(step_ours, step_ref, rtol=1e-5, atol=1e-5)
    assert "forward" not in model.__dict__  # the model's own forward again


def test_fused_steps_under_the_shared_prefix_with_grouped_rows(layer_calls):
    """The trainer's layout: 2 prompts x 4 rows, the prompt prefilled once and the cache expanded."""
    model = load_model(make_run([]).model).eval()
    ids, mask = grouped_prompts()
    sample = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=6, pad_token_id=0,
                  output_logits=True, return_dict_in_generate=True)  # fmt: skip
    outs = []
    with torch.no_grad():
        for fused in (False, True):
            with shared_prefix_generation(model), preallocated_generation(model):
                with skinny_matmul.decode_weights(model) as packed:
                    with fused_decode.fused_decoding(model, packed) if fused else nullcontext():
                        torch.manual_seed(1)
                        outs.append(model.generate(input_ids=ids, attention_mask=mask, **sample))
    assert layer_calls == [ids.size(0)] * (6 * model.config.num_hidden_layers)  # the shared prefill ends at the
    # prompt's second-last token, so generate's first forward (the last prompt token) is a decode step too
    assert torch.equal(outs[0].sequences, outs[1].sequences)
    for a, b in zip(outs[0].logits, outs[1].logits, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_prompts_without_padding_pass_no_mask_and_still_fuse(layer_calls):
    """With no prompt padded, generate() passes the decode steps no attention mask: every cached position is
    visible."""
    model = _model("llama")
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    outs = []
    with torch.no_grad():
        for fused in (False, True):
            with preallocated_generation(model), skinny_matmul.decode_weights(model) as packed:
                with fused_decode.fused_decoding(model, packed) if fused else nullcontext():
                    outs.append(model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), pad_token_id=0,
                                               max_new_tokens=5, do_sample=False,
                                               output_logits=True, return_dict_in_generate=True))  # fmt: skip
    assert layer_calls == [2] * (4 * 2)
    assert torch.equal(outs[0].sequences, outs[1].sequences)
    for a, b in zip(outs[0].logits, outs[1].logits, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_full_cache_grows_and_the_step_still_matches():
    """A cache filled to its capacity by the prefill: the fused step doubles the buffers, as the layer would."""
    model = _model("llama")
    ids, mask = _prompts()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    new = torch.tensor([[20], [21], [22]])
    step = dict(input_ids=new, attention_mask=torch.cat([mask, torch.ones(3, 1, dtype=mask.dtype)], 1),
                position_ids=positions[:, -1:] + 1)  # fmt: skip
    logits = []
    with torch.no_grad(), skinny_matmul.decode_weights(model) as packed:
        for fused in (False, True):
            cache = PreallocatedCache(ids.size(1))  # exactly the prompt: no room for the new token
            model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
            with fused_decode.fused_decoding(model, packed) if fused else nullcontext():
                logits.append(model(**step, cache=cache, use_cache=True).logits[:, -1])
            assert cache.layers[0].length == ids.size(1) + 1 and cache.layers[0]._keys.size(2) == 2 * ids.size(1)
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-5, atol=1e-5)


def test_calls_it_cannot_take_run_the_models_own_forward(layer_calls):
    model = _model("llama")
    ids, mask = _prompts()
    with torch.no_grad(), skinny_matmul.decode_weights(model) as packed:
        with fused_decode.fused_decoding(model, packed) as taken:
            assert taken
            # HF's dynamic cache (train.kv_cache=dynamic): not the fused step's
            model.generate(input_ids=ids, attention_mask=mask, pad_token_id=0, max_new_tokens=3, do_sample=False)
            assert layer_calls == []
            # asked for attentions: HF's forward
            with preallocated_generation(model):
                model.generate(input_ids=ids, attention_mask=mask, pad_token_id=0, max_new_tokens=3,
                               do_sample=False, output_attentions=True, return_dict_in_generate=True)  # fmt: skip
            assert layer_calls == []
            # a decode step with gradients on (generate() itself runs without): HF's forward
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            cache = PreallocatedCache(ids.size(1) + 1)
            model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
            with torch.enable_grad():
                model(input_ids=ids[:, -1:], attention_mask=torch.cat([mask, mask[:, -1:]], 1),
                      position_ids=positions[:, -1:] + 1, cache=cache, use_cache=True)  # fmt: skip
            assert layer_calls == []
            with torch.no_grad():  # the same step without: fused
                cache.crop(-1)
                model(input_ids=ids[:, -1:], attention_mask=torch.cat([mask, mask[:, -1:]], 1),
                      position_ids=positions[:, -1:] + 1, cache=cache, use_cache=True)  # fmt: skip
            assert layer_calls == [3, 3]
            # in training mode with attention dropout, HF's forward (which drops attention weights)
            model.train()
            model.config.attention_dropout = 0.1
            with torch.no_grad():
                cache.crop(-1)
                model(input_ids=ids[:, -1:], attention_mask=torch.cat([mask, mask[:, -1:]], 1),
                      position_ids=positions[:, -1:] + 1, cache=cache, use_cache=True)  # fmt: skip
            assert layer_calls == [3, 3]


def test_models_it_does_not_cover_are_left_alone():
    gpt2_like = load_model(make_run([]).model)
    gpt2_like.config.model_type = "gpt2"
    assert "model type 'gpt2'" in fused_decode.unsupported_reason(gpt2_like)
    gelu = _model("llama")
    gelu.config.hidden_act = "gelu"
    assert fused_decode.unsupported_reason(gelu) == "hidden_act 'gelu' (fused: silu)"
    sliding = _model("qwen2")
    sliding.config.use_sliding_window = True
    assert fused_decode.unsupported_reason(sliding) == "sliding-window attention"
    model = _model("llama")
    with torch.no_grad(), skinny_matmul.decode_weights(model) as packed:
        del packed[model.model.layers[1].mlp.up_proj]  # a linear that was not packed (a LoRA layer, say)
        with fused_decode.fused_decoding(model, packed) as taken:
            assert taken is False and "forward" not in model.__dict__
        with fused_decode.fused_decoding(gelu, {}) as taken:
            assert taken is False


def test_trainer_fuses_decode_steps_when_the_kernel_runs(tmp_path):
    on = rlpost_trainer(make_run(["train.cpu_matmul=onednn"]), tmp_path / "a")
    policy = on.accelerator.unwrap_model(on.model)
    own = policy.__dict__.get("forward")  # TRL's fused log-prob head patches the policy's forward
    with on._generation_context(4):
        assert getattr(policy.forward, "func", None) is fused_decode._forward
    assert policy.__dict__.get("forward") is own
    with on._generation_context(skinny_matmul.MAX_ROWS + 1):  # above the kernel's rows
        assert policy.__dict__.get("forward") is own
    off = rlpost_trainer(make_run(["train.cpu_matmul=onednn", "train.fused_decode=false"]), tmp_path / "b")
    policy = off.accelerator.unwrap_model(off.model)
    own = policy.__dict__.get("forward")
    with off._generation_context(4):
        assert policy.__dict__.get("forward") is own
