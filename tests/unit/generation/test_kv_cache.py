"""train.kv_cache=preallocated: keys and values written in place into buffers sized for the generation;
the samples are bitwise those of HF's dynamic cache."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from rlpost.generation.kv_cache import PreallocatedCache, PreallocatedLayer, generate_with_preallocated_cache
from rlpost.generation.prefix_generation import generate_with_shared_prefix
from rlpost.models.loading import load_model

from support.trainer import grouped_prompts, make_run, rlpost_trainer


def _states(rows: int, new: int, start: float) -> torch.Tensor:
    """[rows, 1 head, new positions, 2]: position p of row r holds (start + p, r)."""
    positions = torch.arange(new, dtype=torch.float32)[None, :, None].expand(rows, new, 1) + start
    row = torch.arange(rows, dtype=torch.float32)[:, None, None].expand(rows, new, 1)
    return torch.cat([positions, row], dim=-1)[:, None]


def test_layer_writes_in_place_and_exposes_the_filled_part():
    layer = PreallocatedLayer(capacity=5)
    keys, values = layer.update(_states(2, 3, 0), -_states(2, 3, 0))  # a prefill of 3 positions
    assert keys.shape == (2, 1, 3, 2) and layer.get_seq_length() == 3
    buffer = layer._keys
    assert buffer.shape == (2, 1, 5, 2)  # the capacity, allocated once
    keys, values = layer.update(_states(2, 1, 3), -_states(2, 1, 3))  # one decode step
    assert layer._keys is buffer and keys.data_ptr() == buffer.data_ptr()  # no copy: a view of the buffer
    # what DynamicLayer's torch.cat would hold: positions 0..3 of each row
    assert torch.equal(keys, _states(2, 4, 0)) and torch.equal(values, -_states(2, 4, 0))
    assert layer.get_mask_sizes(1) == (5, 0)  # HF's mask: cached + the new query


def test_layer_grows_past_its_capacity_keeping_what_it_holds():
    layer = PreallocatedLayer(capacity=2)
    layer.update(_states(1, 2, 0), _states(1, 2, 0))
    keys, _ = layer.update(_states(1, 1, 2), _states(1, 1, 2))  # position 3 of a capacity of 2: doubles
    assert layer._keys.size(2) == 4 and torch.equal(keys, _states(1, 3, 0))
    layer = PreallocatedLayer(capacity=2)
    keys, _ = layer.update(_states(1, 6, 0), _states(1, 6, 0))  # a prefill longer than the capacity
    assert layer._keys.size(2) == 6 and torch.equal(keys, _states(1, 6, 0))


def test_a_writer_of_its_own_gets_the_next_position_with_room_for_it():
    """next_position/advance (rlpost/generation/fused_decode.py's path): the same buffers and exposure as update()."""
    layer = PreallocatedLayer(capacity=2)
    layer.update(_states(2, 2, 0), -_states(2, 2, 0))  # full
    keys, values, position = layer.next_position()  # doubles first, keeping positions 0-1
    assert position == 2 and keys.shape == (2, 1, 4, 2) and keys is layer._keys
    keys[:, :, position], values[:, :, position] = _states(2, 1, 2)[:, :, 0], -_states(2, 1, 2)[:, :, 0]
    assert layer.get_seq_length() == 2  # nothing exposed until advance()
    layer.advance()
    assert layer.get_seq_length() == 3
    assert torch.equal(layer.keys, _states(2, 3, 0)) and torch.equal(layer.values, -_states(2, 3, 0))


def test_row_operations_and_crop_match_the_dynamic_layer():
    """reorder (the shared prefix expands distinct prompts to rows), selection, repetition and crop give
    the keys HF's DynamicCache gives for the same calls."""
    ours, theirs = PreallocatedCache(capacity=8), DynamicCache()
    for cache in (ours, theirs):
        cache.update(_states(2, 3, 0), -_states(2, 3, 0), layer_idx=0)
        cache.reorder_cache(torch.tensor([1, 1, 0]))  # rows 1, 1, 0
        cache.update(_states(3, 1, 3), -_states(3, 1, 3), layer_idx=0)
    assert torch.equal(ours.layers[0].keys, theirs.layers[0].keys)
    assert ours.layers[0]._keys.shape == (3, 1, 8, 2)  # the capacity survives the reorder
    for cache in (ours, theirs):
        cache.batch_select_indices(torch.tensor([2, 0]))
        cache.batch_repeat_interleave(2)
        cache.crop(-1)
    assert torch.equal(ours.layers[0].keys, theirs.layers[0].keys)
    assert torch.equal(ours.layers[0].values, theirs.layers[0].values)
    assert ours.get_seq_length() == theirs.get_seq_length() == 3
    with pytest.raises(ValueError, match="negative"):
        ours.layers[0].crop(2)


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_same_samples_and_scores_as_the_dynamic_cache(shared_prefix):
    """Sampling with the same seed: the same tokens and bitwise the same scores at every step, with the
    cache filled by HF's prefill or by the shared prefill."""
    model = load_model(make_run([]).model).eval()
    ids, mask = grouped_prompts()
    sample = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=6, pad_token_id=0,
                  output_scores=True, return_dict_in_generate=True)  # fmt: skip
    plain = model.generate
    if shared_prefix:

        def plain(**kw):
            return generate_with_shared_prefix(model, model.generate, **kw)

    caches = []

    def recording(**kw):
        caches.append(kw.get("cache"))
        return plain(**kw)

    with torch.no_grad():
        torch.manual_seed(1)
        reference = plain(input_ids=ids, attention_mask=mask, **sample)
        torch.manual_seed(1)
        ours = generate_with_preallocated_cache(model, recording, input_ids=ids, attention_mask=mask, **sample)
    assert isinstance(caches[0], PreallocatedCache)
    assert caches[0].layers[0]._keys.size(2) == ids.size(1) + 6  # prompt width + max_new_tokens
    assert torch.equal(ours.sequences, reference.sequences)
    for step_ours, step_ref in zip(ours.scores, reference.scores, strict=True):  # [6, vocab] per step
        assert torch.equal(step_ours, step_ref)


def test_leaves_beam_search_and_a_given_cache_alone():
    model = load_model(make_run([]).model).eval()
    ids, mask = grouped_prompts()
    seen = []

    def recording(**kw):
        seen.append(kw.get("cache"))
        return model.generate(**kw)

    given = DynamicCache()
    with torch.no_grad():
        generate_with_preallocated_cache(
            model, recording, input_ids=ids, attention_mask=mask, num_beams=2, max_new_tokens=2, pad_token_id=0
        )
        generate_with_preallocated_cache(
            model, recording, input_ids=ids, attention_mask=mask, cache=given, max_new_tokens=2, pad_token_id=0
        )
    assert seen == [None, given]


def test_leaves_a_model_without_a_generation_config_alone():
    """A policy composition (rlpost/models/prism.py) has its own generate and no generation_config: no cache is passed."""

    class Composed(torch.nn.Module):
        def generate(self, **kw):
            return kw

    ids, mask = grouped_prompts()
    model = Composed()
    out = generate_with_preallocated_cache(model, model.generate, input_ids=ids, attention_mask=mask, max_new_tokens=2)
    assert "cache" not in out


def test_trainer_generation_samples_the_same_with_either_cache(tmp_path, monkeypatch):
    """TRL's generation inside the trainer (shared prefix on): kv_cache=preallocated and dynamic give the
    same completions under the same seed, only the first builds a PreallocatedCache, and the generate
    wrappers are gone afterwards."""
    completions, built, init = {}, [], PreallocatedCache.__init__
    monkeypatch.setattr(
        PreallocatedCache, "__init__", lambda self, capacity: (built.append(kind), init(self, capacity))[1]
    )
    for kind in ("preallocated", "dynamic"):
        trainer = rlpost_trainer(make_run([f"train.kv_cache={kind}"]), tmp_path / kind)
        prompts = [trainer.processing_class.encode(text) for text in ("1 + 1 =", "2 + 2 equals")]
        prompt_ids = [p for p in prompts for _ in range(trainer.num_generations)]
        torch.manual_seed(3)
        completions[kind], _ = trainer._generate_single_turn(prompt_ids, None, {}, trainer.num_generations)
        assert "generate" not in trainer.model.__dict__
    assert completions["preallocated"] == completions["dynamic"] and len(completions["dynamic"]) == 8
    assert built == ["preallocated"]  # one generate call, one cache
