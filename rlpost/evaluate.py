"""Held-out evaluation: generate for eval prompts, score with the run's reward terms.

The first reward term is the run's accuracy metric (for ``math_answer`` it is exact correctness);
every term's mean and the weighted reward are reported too. With ``group_by`` (a dataset column,
e.g. AIR's ``variant``) the accuracy is also reported per value of that column.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from rich.progress import Progress


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    tokenizer: Any,
    dataset: Any,
    reward_funcs: list[Callable],
    reward_names: list[str],
    weights: torch.Tensor,
    *,
    max_new_tokens: int,
    batch_size: int = 50,
    greedy: bool = True,
    temperature: float = 1.0,
    size: int | None = None,
    group_by: str | None = None,
    show_progress: bool = True,
) -> dict[str, float]:
    """Accuracy (first reward term), per-term means, weighted reward and mean completion length."""
    rows = [dataset[i] for i in range(min(size or len(dataset), len(dataset)))]
    was_training = model.training
    model.eval()
    completions, lengths = [], []
    with Progress(transient=True, disable=not show_progress) as progress:
        task = progress.add_task("eval", total=len(rows))
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            texts, n_tokens = _generate(
                model, tokenizer, [r["prompt"] for r in chunk], max_new_tokens, greedy, temperature
            )
            completions += texts
            lengths += n_tokens
            progress.advance(task, len(chunk))
    model.train(was_training)

    conversational = isinstance(rows[0]["prompt"], list)
    wrapped = [[{"role": "assistant", "content": c}] if conversational else c for c in completions]
    columns = {k: [r[k] for r in rows] for k in rows[0] if k not in ("prompt", "completion")}
    scores = torch.zeros(len(rows), len(reward_funcs))
    for j, func in enumerate(reward_funcs):
        values = func(prompts=[r["prompt"] for r in rows], completions=wrapped, completion_ids=None, **columns)
        scores[:, j] = torch.tensor([float("nan") if v is None else float(v) for v in values])
    result = {f"eval/{name}": torch.nanmean(scores[:, j]).item() for j, name in enumerate(reward_names)}
    result["eval/accuracy"] = result[f"eval/{reward_names[0]}"]
    result["eval/reward"] = torch.nanmean((scores * weights.cpu()).nansum(dim=1)).item()
    result["eval/mean_length"] = sum(lengths) / max(len(lengths), 1)
    result["eval/num_prompts"] = len(rows)
    if group_by is not None:
        result.update(_accuracy_by(scores[:, 0], [r.get(group_by) for r in rows]))
    return result


def _accuracy_by(accuracy: torch.Tensor, keys: list) -> dict[str, float]:
    """Mean accuracy [N] per distinct key, as eval/accuracy/<key>."""
    by_key: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(str(key), []).append(i)
    return {f"eval/accuracy/{k}": torch.nanmean(accuracy[idx]).item() for k, idx in sorted(by_key.items())}


def _generate(model, tokenizer, prompts: list, max_new_tokens: int, greedy: bool, temperature: float):
    """Left-padded batch generation; returns decoded completions and their token counts."""
    if isinstance(prompts[0], list):
        prompts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    tokenizer.padding_side = side
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature}
    out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling)
    new = out[:, enc["input_ids"].size(1) :]
    eos = tokenizer.eos_token_id
    lengths = [int(((row != eos).cumprod(0)).sum().item()) + int((row == eos).any().item()) for row in new]
    texts = [tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(new, lengths)]
    return texts, lengths
