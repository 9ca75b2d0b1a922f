"""Rollout generation on CPU: HF ``generate`` (what TRL calls) against the alternatives the issue names.

The job is one GRPO generation batch of the default recipe: 2 prompts of the default data x G=4,
left-padded, sampled at temperature 1 for up to 32 new tokens with SmolLM2-135M in fp32. Variants:

- ``hf dynamic``: ``model.generate`` with the dynamic KV cache (TRL's call; it stops as soon as every
  sequence has emitted EOS);
- ``hf dynamic, shared prefix``: the same call under rlpost's ``train.shared_prefix``
  (rlpost/generation/prefix_generation.py): each distinct prompt prefilled once, its KV cache expanded to the rows;
- ``+ oneDNN packed``: and rlpost's ``train.cpu_matmul`` (rlpost/generation/onednn.py): every linear through
  oneDNN with its weight packed once per call (the packing is inside the timed call);
- ``+ decode kernel``: and rlpost's ``train.decode_kernel`` (rlpost/generation/skinny_matmul.py): the decode steps'
  linears through rlpost's compiled kernel on its own packed weights (the prefill stays on oneDNN);
- ``+ preallocated cache, fused decode steps, parallel sampling draw``: rlpost's defaults on top of the
  kernel: the KV cache written in place (``train.kv_cache``, rlpost/generation/kv_cache.py), each decode step one
  compiled call per decoder layer (``train.fused_decode``, rlpost/generation/fused_decode.py) and ``torch.multinomial``'s
  draw on every core (rlpost/generation/parallel_sampling.py);
- ``+ decode kernel on PyTorch's linears``: the kernel for the decode steps with the linears left on
  PyTorch's ``mm`` (MKL), the prefill too: the route ``train.cpu_matmul=auto`` takes where MKL wins the
  training products (the 2-core Intel Xeon of issue 23), which still decodes through the kernel;
- ``lean loop``: a minimal prefill + decode loop (``logits_to_keep=1``, softmax, ``multinomial``), the
  same sampling ops in the same order, so with the same seed it must give the same tokens;
- ``hf static``: ``cache_implementation="static"`` without compilation;
- ``hf static + torch.compile (inductor)``: the same with the model's forward compiled by ``torch.compile``
  (transformers compiles by itself only on CUDA; first call = compile time, reported separately).

Each variant: one warm-up call, then the median of ``--reps`` calls; every call reseeds, and the
completions are compared with ``hf dynamic``'s.

Usage: .venv/bin/python bench/generation.py [--reps 3] [--no-compile]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def lean_generate(model, ids, mask, max_new: int, eos: int, pad: int) -> torch.Tensor:
    """Prefill once, then one token per forward until every row has emitted EOS: [B, <= max_new]."""
    from transformers import DynamicCache

    cache, done, tokens = DynamicCache(), torch.zeros(ids.size(0), dtype=torch.bool), []
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, logits_to_keep=1)
    position = positions[:, -1:]
    for _ in range(max_new):
        token = torch.multinomial(torch.softmax(out.logits[:, -1].float(), dim=-1), 1).squeeze(1)
        token = torch.where(done, torch.full_like(token, pad), token)
        tokens.append(token)
        done |= token == eos
        if done.all():
            break
        mask, position = torch.cat([mask, mask.new_ones(mask.size(0), 1)], dim=1), position + 1
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=position, past_key_values=cache)
    return torch.stack(tokens, dim=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    args = p.parse_args()

    from rlpost.app import compose
    from rlpost.build import build_run
    from rlpost.data.sources import load_datasets
    from rlpost.generation import onednn, skinny_matmul
    from rlpost.generation.fused_decode import fused_decoding
    from rlpost.generation.kv_cache import preallocated_generation
    from rlpost.generation.parallel_sampling import parallel_multinomial
    from rlpost.generation.prefix_generation import shared_prefix_generation
    from rlpost.models.loading import load_model, load_tokenizer

    run = build_run(compose([]))
    tokenizer, model = load_tokenizer(run.model), load_model(run.model).eval()
    rows = load_datasets(run.data)[0]
    texts = [
        tokenizer.apply_chat_template(rows[i]["prompt"], tokenize=False, add_generation_prompt=True) for i in (0, 1)
    ]
    tokenizer.padding_side = "left"
    enc = tokenizer([t for t in texts for _ in range(4)], return_tensors="pt", padding=True)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    sample = dict(
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=args.max_new_tokens, pad_token_id=pad
    )

    def hf(**extra):
        out = model.generate(**enc, **sample, **extra)
        return out[:, enc.input_ids.size(1) :]

    def shared(**extra):  # rlpost's train.shared_prefix: each distinct prompt prefilled once
        with shared_prefix_generation(model):
            return hf(**extra)

    def shared_onednn(kernel=False, **extra):  # + train.cpu_matmul=onednn: linears through oneDNN, packed per call
        onednn.use_onednn_linears(model)
        try:
            rows = enc.input_ids.size(0)
            use_kernel = kernel and skinny_matmul.applies(rows)
            weights = skinny_matmul.decode_weights(model) if use_kernel else onednn.packed_weights(model, rows)
            with shared_prefix_generation(model), weights:
                return hf(**extra)
        finally:  # the other variants run PyTorch's linears
            for module in model.modules():
                module.__dict__.pop("forward", None)

    def fused(**extra):  # rlpost's defaults: + preallocated cache, fused decode steps, the draw on every core
        onednn.use_onednn_linears(model)
        try:
            with shared_prefix_generation(model), preallocated_generation(model), parallel_multinomial():
                with skinny_matmul.decode_weights(model) as packed, fused_decoding(model, packed):
                    return hf(**extra)
        finally:
            for module in model.modules():
                module.__dict__.pop("forward", None)

    def shared_kernel(**extra):  # the kernel on plain nn.Linear layers: auto's aten route with the kernel
        with shared_prefix_generation(model), skinny_matmul.decode_weights(model):
            return hf(**extra)

    variants = [
        ("hf dynamic", lambda: hf(disable_compile=True)),
        ("hf dynamic, shared prefix", lambda: shared(disable_compile=True)),
        ("hf dynamic, shared prefix + oneDNN packed", lambda: shared_onednn(disable_compile=True)),
        (
            "hf dynamic, shared prefix + oneDNN packed + decode kernel",
            lambda: shared_onednn(True, disable_compile=True),
        ),
    ]
    if skinny_matmul.applies(enc.input_ids.size(0)):
        variants.append(
            (
                "hf dynamic, shared prefix + oneDNN packed + decode kernel + preallocated cache, fused decode steps, "
                "parallel sampling draw (rlpost's defaults)",
                lambda: fused(disable_compile=True),
            )
        )
        variants.append(
            (
                "hf dynamic, shared prefix + decode kernel on PyTorch's linears",
                lambda: shared_kernel(disable_compile=True),
            )
        )
    variants += [
        ("lean loop", lambda: lean_generate(model, enc.input_ids, enc.attention_mask, args.max_new_tokens, eos, pad)),
        ("hf static", lambda: hf(cache_implementation="static", disable_compile=True)),
    ]
    if not args.no_compile:  # last: it replaces model.forward (transformers compiles by itself only on CUDA)

        def compiled_static():
            if "forward" not in model.__dict__:  # compiled at the first call: the "first call s" column
                model.forward = torch.compile(model.forward)
            return hf(cache_implementation="static", disable_compile=True)

        variants.append(("hf static + torch.compile (inductor)", compiled_static))
    print("| variant | s/call | new tok/s | first call s | same tokens as hf dynamic |\n|---|---|---|---|---|")
    reference = None
    for label, generate in variants:
        times, outs = [], []
        with torch.no_grad():
            for _ in range(args.reps + 1):
                torch.manual_seed(0)
                t = time.perf_counter()
                outs.append(generate())
                times.append(time.perf_counter() - t)
        first, median = times[0], statistics.median(times[1:])
        ids = outs[-1]
        n = int((ids != pad).sum()) if pad != eos else ids.numel()
        reference = ids if reference is None else reference
        same = ids.shape == reference.shape and torch.equal(ids, reference)
        print(f"| {label} | {median:.2f} | {n / median:.1f} | {first:.1f} | {'yes' if same else 'no'} |", flush=True)


if __name__ == "__main__":
    with torch.inference_mode():
        main()
