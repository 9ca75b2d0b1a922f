"""One measured training run (run in a fresh subprocess by bench/step_time.py), and the machine's facts.

A run is a *variant*: ``{"label", "trainer": "TRL" | "rlpost", "overrides": [...], "trl": {...}}``.
Both trainers get the same composed config (``build_run(compose(BASE + overrides))``, as in
tests/support/trainer.py): same weights, prompts, seed, group size, lengths, lr 1e-5, fp32 on CPU. A TRL
variant additionally gets ``trl`` (its ``loss_type`` settings, which rlpost's bundle reproduces exactly:
tests/trainer/test_trl_equivalence.py).

Both trainers are subclassed by the same timing mixin, which adds up per optimizer step:
- step: wall time between consecutive ``on_step_end`` callbacks (optimizer, logging and data included);
- gen: time in ``_generate`` (tokenize, ``model.generate``, decode) and the completion tokens it made;
- score: the rest of ``_generate_and_score_completions`` (rewards, advantages, bookkeeping);
- loss: ``_compute_loss`` minus its log-prob forward (TRL's ``loss_type`` branch vs rlpost's components);
- CPU: process CPU time per step (``time.process_time``);
- train: ``training_step`` minus ``_generate_and_score_completions`` (forward + backward + loss), with
  the prompt + completion tokens (attention-mask ones, not padding) that went through it.

Training FLOPs (model FLOPs, as in MFU) are ``6 * N * tokens`` for the transformer body (N = parameters
outside the embedding; tokens = the prompt + completion tokens the backbone runs, padding excluded; with
rlpost's shared prompt prefix each distinct prompt counts once, and packed rows skip each completion's
last token) plus ``6 * d_model * vocab * completion tokens`` for the LM head (only completion positions
need log-probs); attention score FLOPs (about 1% at these lengths) are left out. ``grad``: time in ``_clip_grad_norm`` (rlpost's gradient transforms run there).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import tempfile
import time
from collections import defaultdict
from datetime import datetime

BASE = ["train.learning_rate=1e-5", "logging.trackers=[]", "logging.progress=false"]


def measured_run(
    variant: dict, model: str, steps: int, threads: int, hardware: str = "cpu", extra: tuple[str, ...] = ()
) -> dict:
    """Train ``steps`` optimizer steps of ``variant`` on ``hardware`` (cpu or gpu; ``extra``: overrides of
    every variant, e.g. model sizes); per-step timings, peak RSS, completions hash."""
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlpost.algorithms import trainer_class
    from rlpost.app import compose
    from rlpost.build import build_run
    from rlpost.data.sources import load_datasets
    from rlpost.generation.prefix_generation import prompt_groups
    from rlpost.models.loading import load_model, load_tokenizer

    if threads:
        torch.set_num_threads(threads)
    base = [f"model={model}", f"hardware={hardware}", f"train.steps={steps}", *BASE, *extra]
    run = build_run(compose([*base, *variant["overrides"]]))
    kwargs = run.grpo_config_kwargs(tempfile.mkdtemp(prefix="rlpost-bench-"))
    if variant["trainer"] == "TRL":
        kwargs.update(variant.get("trl", {}))
    acc, steps_out, texts = defaultdict(float), [], []

    class Timed:  # the same timing wrapper around both trainers
        def _generate(self, prompts):
            t = time.perf_counter()
            out = super()._generate(prompts)
            acc["gen_s"] += time.perf_counter() - t
            acc["gen_tokens"] += sum(len(ids) for ids in out[1])
            steps = max((len(ids) for ids in out[1]), default=0)  # decode steps of this call
            context = max((len(ids) for ids in out[0]), default=0) + steps / 2  # mean cached positions per row
            acc["decode_steps"] += steps
            acc["kv_positions"] += steps * len(out[1]) * context  # summed over decode steps: rows x context
            texts.extend(str(c) for c in out[3])
            return out

        def _generate_and_score_completions(self, inputs):
            t = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            acc["gen_score_s"] += time.perf_counter() - t
            return out

        def training_step(self, model, inputs, num_items_in_batch):
            t = time.perf_counter()
            out = super().training_step(model, inputs, num_items_in_batch)
            acc["train_step_s"] += time.perf_counter() - t
            return out

        def _compute_loss(self, model, inputs):
            t, logps_before = time.perf_counter(), acc["all_logps_s"]
            out = super()._compute_loss(model, inputs)
            acc["loss_s"] += time.perf_counter() - t
            acc["logps_s"] += acc["all_logps_s"] - logps_before  # the log-prob forward of the loss only
            return out

        def _get_per_token_logps_and_entropies(self, *a, **kw):
            t = time.perf_counter()
            out = super()._get_per_token_logps_and_entropies(*a, **kw)
            acc["all_logps_s"] += time.perf_counter() - t
            return out

        def _clip_grad_norm(self, model):  # rlpost's seam 5 runs its grad transform in here
            t = time.perf_counter()
            out = super()._clip_grad_norm(model)
            acc["grad_s"] += time.perf_counter() - t
            return out

        def compute_loss(self, model, inputs, **kw):
            prompt, completion = inputs["prompt_mask"], inputs["completion_mask"]
            acc["train_tokens"] += float(prompt.sum() + completion.sum())
            acc["completion_tokens"] += float(completion.sum())
            prompt_tokens, completion_tokens = prompt.sum(), completion.sum()  # the tokens the backbone runs
            if getattr(self, "_compact_logprobs", lambda: False)() and self._share_prefix():
                distinct, _ = prompt_groups(inputs["prompt_ids"], prompt)  # [D, 2P]: ids, then mask
                prompt_tokens = distinct[:, prompt.size(1) :].sum()
                if self._packing():  # packed rows skip each completion's last token (it predicts nothing)
                    completion_tokens = completion_tokens - completion.sum(1).gt(0).sum()
            acc["executed_tokens"] += float(prompt_tokens + completion_tokens)
            return super().compute_loss(model, inputs, **kw)

    class StepClock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.last = getattr(self, "last", None) or (time.perf_counter(), time.process_time())

        def on_step_end(self, a, state, control, **kw):
            now = (time.perf_counter(), time.process_time())
            steps_out.append({"step_s": now[0] - self.last[0], "cpu_s": now[1] - self.last[1], **acc})
            self.last = now
            acc.clear()

    policy = load_model(run.model)
    common = dict(
        model=policy,
        args=GRPOConfig(**kwargs),
        train_dataset=load_datasets(run.data)[0],
        processing_class=load_tokenizer(run.model),
        callbacks=[StepClock()],
    )
    if variant["trainer"] == "TRL":
        trainer = type("TimedGRPO", (Timed, GRPOTrainer), {})(reward_funcs=run.reward.funcs, **common)
    else:
        trainer = type("TimedRLPost", (Timed, trainer_class(run)), {})(run=run, sample_sink=lambda rows: None, **common)
    trainer.train()
    config = policy.config
    embedding = config.vocab_size * config.hidden_size
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    weight_bytes = next(policy.parameters()).element_size()
    return {
        "steps": steps_out,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch_threads": torch.get_num_threads(),
        "completions_hash": hashlib.sha1(json.dumps(texts).encode()).hexdigest(),
        "body_params": sum(p.numel() for p in policy.parameters()) - embedding,  # tied head: counted once
        "head_params": embedding,
        # bytes a decode step must read: every weight once (the tied head once; an embedding lookup reads
        # only its rows), plus per cached position of each row its keys and values in every layer
        "decode_weight_bytes": weight_bytes * sum(p.numel() for p in policy.parameters()),
        "kv_bytes_per_position": weight_bytes * 2 * config.num_hidden_layers * kv_heads * head_dim,
        "rewards": [log["reward"] for log in trainer.state.log_history if "reward" in log],
    }


def cli_run(
    variant: dict, model: str, steps: int, threads: int, hardware: str = "cpu", extra: tuple[str, ...] = ()
) -> dict:
    """``rlpost train`` itself on the same job (for what only the CLI does, e.g. ``hardware.num_processes``
    > 1 under ``accelerate launch``): its logged per-step ``step_time``; the other columns stay empty."""
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    with tempfile.TemporaryDirectory(prefix="rlpost-bench-cli-") as tmp:  # the run's model is not kept
        out = Path(tmp)
        overrides = [f"model={model}", f"hardware={hardware}", f"train.steps={steps}", *BASE, *extra,
                     *variant["overrides"], "logging.plots=false", "eval.at_start=false", "eval.at_end=false",
                     f"hydra.run.dir={out}"]  # fmt: skip
        subprocess.run([sys.executable, "-m", "rlpost.cli", "train", *overrides], check=True, env=env)
        logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"steps": [{"step_s": log["step_time"]} for log in logs if "step_time" in log], "cli": True}


def summarize_run(result: dict, warmup: int) -> dict:
    """Over the timed steps (the first ``warmup`` excluded): the mean step and CPU time (a long-completion step
    takes several times another when its completions hit the cap, so a median would report whichever steps
    fall in the middle), medians of the components, token sums over time sums; a CLI run (``cli_run``) has
    its step time only (NaN elsewhere)."""
    import statistics

    timed = result["steps"][warmup:]
    if result.get("cli"):
        return {"step_s": statistics.fmean(s["step_s"] for s in timed), "cpu_s": float("nan"),
                "gen_tok_s": float("nan"), "score_ms": float("nan"), "loss_ms": float("nan"),
                "grad_ms": float("nan"), "train_tok_s": float("nan"), "train_gflop_s": float("nan"),
                "peak_rss_mb": float("nan"), "decode_gb_s": float("nan")}  # fmt: skip
    total = {k: sum(s.get(k, 0.0) for s in timed) for k in timed[0]}
    train_s = total["train_step_s"] - total["gen_score_s"]
    tokens = total.get("executed_tokens", total["train_tokens"])
    flops = 6 * result["body_params"] * tokens + 6 * result["head_params"] * total["completion_tokens"]
    return {
        "step_s": statistics.fmean(s["step_s"] for s in timed),
        "cpu_s": statistics.fmean(s["cpu_s"] for s in timed),
        "gen_tok_s": total["gen_tokens"] / max(total["gen_s"], 1e-9),
        "score_ms": statistics.median(1e3 * (s.get("gen_score_s", 0) - s.get("gen_s", 0)) for s in timed),
        "loss_ms": statistics.median(1e3 * (s.get("loss_s", 0) - s.get("logps_s", 0)) for s in timed),
        "grad_ms": statistics.median(1e3 * s.get("grad_s", 0) for s in timed),
        "train_tok_s": total["train_tokens"] / max(train_s, 1e-9),
        "train_gflop_s": flops / max(train_s, 1e-9) / 1e9,
        "peak_rss_mb": result["peak_rss_mb"],
        # decode's rate of memory traffic: the bytes its steps must read over the generation time (which
        # also holds the prefill and tokenization, so this is a lower bound on the decode loop's own rate)
        "decode_gb_s": (
            result.get("decode_weight_bytes", 0) * total.get("decode_steps", 0)
            + result.get("kv_bytes_per_position", 0) * total.get("kv_positions", 0)
        )
        / max(total["gen_s"], 1e-9)
        / 1e9,
    }


def matmul_peak_gflops(threads: int, size: int = 2048, reps: int = 8, device: str = "cpu") -> dict[str, float]:
    """Best measured fp32 rate of a ``size x size`` matmul with ``threads`` torch threads, by kernel:
    ``torch`` (``a @ b``: MKL's sgemm on x86) and, where available, ``onednn`` (rlpost/generation/onednn.py).
    On ``device="cuda"``: the bf16 rate of an 8192^3 product (the GPU runs bf16 mixed precision)."""
    import torch

    from rlpost.generation import onednn

    if device == "cuda":
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ a
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            a @ a
        torch.cuda.synchronize()
        return {"cuda bf16": reps * 2 * 8192**3 / (time.perf_counter() - t) / 1e9}

    if threads:
        torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    kernels = {"torch": lambda: a @ b}
    if onednn.available():
        kernels["onednn"] = lambda: onednn.matmul_nt(a, b, True)
    rates = {}
    for name, run in kernels.items():
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - t)
        rates[name] = 2 * size**3 / best / 1e9
    return rates


def memory_bandwidth_gbs(threads: int, mib: int = 256, reps: int = 10) -> float:
    """STREAM-like copy bandwidth in GB/s: ``b[:] = a`` over two ``mib``-MiB fp32 arrays (far beyond any
    cache) with ``threads`` torch threads, best of ``reps``; each copy reads ``a`` and writes ``b``
    (2 x ``mib`` MiB of traffic, STREAM's convention for Copy)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    n = mib * 2**20 // 4
    a, b = torch.ones(n), torch.empty(n)
    b.copy_(a)  # fault the pages in
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        b.copy_(a)
        best = min(best, time.perf_counter() - t)
    return 2 * n * 4 / best / 1e9


def machine(threads: int, load: float) -> str:
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown CPU"
    import torch
    import transformers
    import trl

    cores = f"{len(os.sched_getaffinity(0))} usable of {os.cpu_count()} logical cores"
    gpu = f"{torch.cuda.get_device_name(0)}; " if torch.cuda.is_available() else ""
    return (
        f"{gpu}{cpu}; {cores}; load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end; torch {torch.__version__} "
        f"({threads} thread{'s' if threads > 1 else ''} per run), transformers {transformers.__version__}, "
        f"trl {trl.__version__}; Python {platform.python_version()}; {datetime.now().strftime('%Y-%m-%d %H:%M')}"
    )
