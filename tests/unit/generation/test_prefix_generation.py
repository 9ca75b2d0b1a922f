"""train.shared_prefix in generation: each distinct prompt is prefilled once, the samples do not change."""

from __future__ import annotations

import torch

from rlpost.generation.prefix_generation import (
    generate_with_shared_prefix,
    shared_prefix_cache,
    shared_prefix_generation,
)
from rlpost.models.loading import load_model

from support.trainer import grouped_prompts, make_run, rlpost_trainer


def _forward_shapes(model):
    """Records the input_ids shape of every forward of ``model`` (a forward pre-hook)."""
    shapes = []
    handle = model.register_forward_pre_hook(
        lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    return shapes, handle


def test_cache_is_the_full_prefill_expanded():
    """The shared cache holds, for every row, the keys/values that row's own prefill of its first S - 1 tokens gives."""
    model = load_model(make_run([]).model).eval()
    ids, mask = grouped_prompts()
    with torch.no_grad():
        cache = shared_prefix_cache(model, ids, mask)
        from transformers import DynamicCache

        full = DynamicCache()
        positions = (mask[:, :-1].cumsum(-1) - 1).clamp(min=0)
        model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions, cache=full)
    assert cache.get_seq_length() == ids.size(1) - 1
    for layer in range(len(full.layers)):
        shared_k, full_k = cache.layers[layer].keys, full.layers[layer].keys  # [6, heads, 6, head_dim]
        assert shared_k.shape == full_k.shape and shared_k.size(0) == 6
        keep = mask[:, :-1].bool()[:, None, :, None]  # padded positions hold whatever the kernel left there
        torch.testing.assert_close(shared_k * keep, full_k * keep, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(
            cache.layers[layer].values * keep, full.layers[layer].values * keep, rtol=1e-5, atol=1e-5
        )


def test_same_samples_and_one_prefill_per_distinct_prompt():
    """Sampling with the same seed gives the same tokens and the same scores (to float rounding); the
    forwards show the saving: [2, 6] (distinct prompts, all but the last token), then [6, 1] per token."""
    model = load_model(make_run([]).model).eval()
    ids, mask = grouped_prompts()
    sample = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=6, pad_token_id=0,
                  output_scores=True, return_dict_in_generate=True)  # fmt: skip
    shapes, handle = _forward_shapes(model)
    with torch.no_grad():
        torch.manual_seed(1)
        plain = model.generate(input_ids=ids, attention_mask=mask, **sample)
        plain_shapes = list(shapes)
        shapes.clear()
        torch.manual_seed(1)
        shared = generate_with_shared_prefix(model, model.generate, input_ids=ids, attention_mask=mask, **sample)
    handle.remove()
    assert plain_shapes[0] == (6, 7) and shapes[:2] == [(2, 6), (6, 1)]
    assert len(shapes) == len(plain_shapes) + 1  # one forward more, 24 tokens fewer
    assert torch.equal(shared.sequences, plain.sequences)
    for ours, theirs in zip(shared.scores, plain.scores):  # [6, vocab] per step
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_falls_back_when_nothing_is_shared_and_restores_generate():
    model = load_model(make_run([]).model).eval()
    ids, mask = grouped_prompts()
    assert shared_prefix_cache(model, ids[[0, 3]], mask[[0, 3]]) is None  # two distinct prompts: nothing to save
    shapes, handle = _forward_shapes(model)
    with torch.no_grad(), shared_prefix_generation(model):
        assert "generate" in model.__dict__
        model.generate(input_ids=ids, attention_mask=mask, num_beams=2, max_new_tokens=2, pad_token_id=0)
    handle.remove()
    assert shapes[0] == (12, 7)  # beam search keeps HF's own prefill (2 beams x 6 rows)
    assert "generate" not in model.__dict__


def test_trainer_generation_shares_prompts_and_samples_the_same(tmp_path):
    """TRL's generation inside the trainer: with train.shared_prefix the first forward runs the distinct
    prompts only, and the completions equal those of shared_prefix=false under the same seed."""
    completions, first_shapes = {}, {}
    for share in (True, False):
        trainer = rlpost_trainer(make_run([f"train.shared_prefix={str(share).lower()}"]), tmp_path / str(share))
        prompts = [trainer.processing_class.encode(text) for text in ("1 + 1 =", "2 + 2 equals")]
        prompt_ids = [p for p in prompts for _ in range(trainer.num_generations)]
        shapes, handle = _forward_shapes(trainer.model)
        torch.manual_seed(3)
        completions[share], _ = trainer._generate_single_turn(prompt_ids, None, {}, trainer.num_generations)
        handle.remove()
        first_shapes[share] = shapes[0]
        assert "generate" not in trainer.model.__dict__
    width = max(map(len, prompts))
    assert first_shapes == {True: (2, width - 1), False: (8, width)}
    assert completions[True] == completions[False] and len(completions[True]) == 8
