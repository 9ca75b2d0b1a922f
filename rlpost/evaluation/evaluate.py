"""Held-out evaluation: generate for eval prompts, score with the run's reward terms.

Every term's mean and the reward are reported. The reward is the run's own combination of the terms
(``RewardParts.scored``: the combined reward, or the score of a combine that returns advantages), so
``eval/reward`` is the training reward; a sample that no term could score is left out of its mean, as in
training. ``eval/accuracy`` is reported only with a correctness criterion (``correct``,
rlpost/scoring/correctness.py: a verifiable term and its threshold): the share of scored prompts whose
completion is correct. With a term that scores abstention (``ternary_abstention``), abstention precision,
recall and F1 (rlpost/evaluation/abstention.py). With ``group_by`` (a dataset column, e.g. AIR's ``variant``) the accuracy (or,
without a criterion, the reward) is also reported per value of that column; with ``variants_of`` (a column naming
the question a row is a variant of, e.g. AIR's ``intent_id``) and a criterion, the group accuracy and consistency
over each question's variants (rlpost/evaluation/invariance.py); with ``without_demos`` (a column holding each
prompt's user turn without its demonstrations) and a criterion, a second greedy pass on those turns and the
accuracy with minus without the demonstrations (rlpost/evaluation/few_shot.py).

``evaluate_sampled`` draws ``n`` completions per prompt and reports, with a criterion, pass@k with the
unbiased estimator ``1 - C(n - c, k) / C(n, k)`` (c = correct samples of the prompt; Chen et al. 2021),
averaged over prompts, avg@n (the mean share of correct samples) and maj@k (majority vote over the
extracted answers of the first k samples); always the reward, the within-group reward spread that
GRPO's advantages feed on (``rlpost diagnose``, seed 004 #13) and the mean length. An unscorable
sample (None/NaN) counts as incorrect for pass@k and maj@k and is skipped in means. With ``calibration`` (a column of
numeric targets) the n samples of a prompt are its predictive distribution: CRPS, central-interval coverage,
width and rank correlation of the predictions (rlpost/evaluation/calibration.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from rich.progress import Progress

from rlpost.core.chat import answer_text, completion_text
from rlpost.envs.base import Environment
from rlpost.envs.runner import ChatRenderer, EpisodeResult, episode_fields, episode_metrics, run_episodes
from rlpost.evaluation.abstention import abstention_metrics
from rlpost.evaluation.calibration import calibration_scores
from rlpost.evaluation.few_shot import few_shot_metrics
from rlpost.evaluation.invariance import variant_metrics
from rlpost.generation import onednn
from rlpost.generation.kv_cache import preallocated_generation
from rlpost.rewards.few_shot_gain import zero_shot_prompt
from rlpost.rewards.group import extract_answer
from rlpost.rewards.math_answer import gold_number, last_number
from rlpost.scoring.correctness import Correctness
from rlpost.scoring.score import score

# reward terms [N, R] (NaN = unscorable), G (completions per prompt) -> rewards [N] and the combiner's metrics
Combine = Callable[[torch.Tensor, int], tuple[torch.Tensor, dict[str, float]]]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    tokenizer: Any,
    dataset: Any,
    reward_funcs: list[Callable],
    reward_names: list[str],
    combine: Combine,
    *,
    max_new_tokens: int,
    correct: Correctness | None = None,
    batch_size: int = 50,
    greedy: bool = True,
    temperature: float = 1.0,
    size: int | None = None,
    group_by: str | None = None,
    variants_of: str | None = None,
    show_progress: bool = True,
    env: Environment | None = None,
    items: list[dict[str, Any]] | None = None,
    prefix: str = "eval",
    without_demos: str | None = None,
) -> dict[str, float]:
    """Accuracy (with ``correct``), per-term means, the reward and mean completion length, as ``<prefix>/...``;
    with ``env`` each prompt is one episode (rlpost/envs/runner.py), its length the tokens the policy wrote,
    and the environment's counts are reported per episode (``eval/env/*``). ``items``, when given, receives
    one row per held-out prompt, ``{"index", "reward"}`` plus, with a criterion, ``"score"`` (the criterion
    term's score) and ``"correct"`` (None when unscorable): what ``rlpost compare`` pairs item by item; and
    ``"completion"``, the policy's text (an episode's assistant turns), for reading what it got wrong."""
    rows = [dataset[i] for i in range(min(size or len(dataset), len(dataset)))]
    was_training = model.training
    model.eval()
    completions, lengths, episodes = [], [], []
    with Progress(transient=True, disable=not show_progress) as progress:
        task = progress.add_task(prefix, total=len(rows))
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            if env is not None:
                episodes += _episodes(model, tokenizer, env, chunk, start, max_new_tokens, greedy, temperature)
            else:
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
    if env is not None:
        wrapped, lengths = [r.messages for r in episodes], [r.episode.trained_tokens for r in episodes]
        columns.update({k: v for k, v in episode_fields(episodes).items() if k != "env_mask"})
    scores = torch.zeros(len(rows), len(reward_funcs))
    for j, func in enumerate(reward_funcs):
        values = func(prompts=[r["prompt"] for r in rows], completions=wrapped, completion_ids=None, **columns)
        scores[:, j] = torch.tensor([float("nan") if v is None else float(v) for v in values])
    result = {
        f"{prefix}/{name}": _term_mean(scores[:, j], columns.get(getattr(func, "mean_weights", None) or ""))
        for j, (name, func) in enumerate(zip(reward_names, reward_funcs))
    }
    rewards = combine(scores, 1)[0]  # [N] the training reward, one sample each
    per_row = rewards  # [N] what group_by breaks down: correctness (1/0, NaN unscored) or the reward
    if correct is not None:
        result[f"{prefix}/accuracy"] = correct.accuracy(scores)
        nan = torch.full((len(rows),), float("nan"))
        per_row = torch.where(correct.scored(scores), correct.correct(scores).float(), nan)
        verdicts = [None if math.isnan(v) else v == 1.0 for v in per_row.tolist()]
        if variants_of is not None:  # every variant of a question right; its variants agreeing
            result.update(variant_metrics(verdicts, [r.get(variants_of) for r in rows], prefix))
        if without_demos is not None:  # the same prompts without their demonstrations (few_shot.py)
            zero_shot = _zero_shot_verdicts(model, tokenizer, rows, reward_funcs[correct.index], correct.threshold,
                                            without_demos, max_new_tokens, batch_size, greedy, temperature, columns)  # fmt: skip
            result.update(few_shot_metrics(verdicts, zero_shot, prefix))
    result[f"{prefix}/reward"] = torch.nanmean(rewards).item()
    result.update(abstention_metrics(reward_funcs, wrapped, columns, prefix))  # a term that scores abstention
    if items is not None:
        items.extend(_item(i, scores[i], rewards[i], correct, wrapped[i]) for i in range(len(rows)))
    result[f"{prefix}/mean_length"] = sum(lengths) / max(len(lengths), 1)
    result[f"{prefix}/num_prompts"] = len(rows)
    if group_by is not None:
        metric = f"{prefix}/accuracy" if correct is not None else f"{prefix}/reward"
        result.update(_mean_by(per_row, [r.get(group_by) for r in rows], metric))
    if env is not None:
        result.update(episode_eval_metrics(episodes, env, prefix))
    return result


def _zero_shot_verdicts(
    model, tokenizer, rows: list[dict], func: Callable, threshold: float, column: str, max_new_tokens: int,
    batch_size: int, greedy: bool, temperature: float, columns: dict[str, list],
) -> list[bool | None]:  # fmt: skip
    """The criterion term's verdict ``[N]`` (None: unscored) on each row answered with its user turn replaced by
    ``row[column]`` (the prompt without its demonstrations)."""
    prompts = [zero_shot_prompt(r["prompt"], str(r[column])) for r in rows]
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        texts += _generate(model, tokenizer, chunk, max_new_tokens, greedy, temperature)[0]
    wrapped = [[{"role": "assistant", "content": t}] if isinstance(p, list) else t for p, t in zip(prompts, texts)]
    values = func(prompts=prompts, completions=wrapped, completion_ids=None, **columns)
    return [None if v is None or math.isnan(float(v)) else float(v) >= threshold for v in values]


def _term_mean(values: torch.Tensor, weights: list | None) -> float:
    """Mean of one term's scores ``[N]`` over the scored rows; weighted by a row column when the term names one
    (``Reward.mean_weights``: IFEval's instruction-level accuracy counts instructions, not prompts)."""
    if weights is None:
        return torch.nanmean(values).item()
    w = torch.tensor([float(x) for x in weights])
    scored = ~torch.isnan(values)
    return ((values[scored] * w[scored]).sum() / w[scored].sum().clamp(min=1e-12)).item()


def _item(
    index: int, scores: torch.Tensor, reward: torch.Tensor, correct: Correctness | None, completion: Any
) -> dict[str, Any]:
    """One held-out prompt's row of eval_items.json (scores ``[R]``), with the text it was scored on."""
    item: dict[str, Any] = {"index": index, "reward": _number(reward)}
    if correct is not None:
        item["score"] = _number(scores[correct.index])
        item["correct"] = bool(correct.correct(scores)) if bool(correct.scored(scores)) else None
    item["completion"] = completion_text(completion)  # an episode: every policy turn
    return item


def _number(x: torch.Tensor) -> float | None:
    value = float(x)
    return None if math.isnan(value) else value


def episode_eval_metrics(
    episodes: list[EpisodeResult], env: Environment | None = None, prefix: str = "eval"
) -> dict[str, float]:
    """Per-episode means of the environment's counts (and its own metrics), the share of episodes that called a
    tool, and the share of tool calls that were valid (answered with a result, not an error): ``<prefix>/env/...``."""
    sums = episode_metrics(episodes, env)
    n = max(sums.pop("episodes"), 1.0)
    out = {f"{prefix}/env/{name}": value / n for name, value in sums.items()}
    out[f"{prefix}/env/tool_use"] = sum(r.tool_calls > 0 for r in episodes) / n
    calls = sums["tool_calls"]
    out[f"{prefix}/env/valid_call_rate"] = (calls - sums["tool_errors"]) / calls if calls else 0.0
    return out


def _episodes(model, tokenizer, env: Environment, rows: list[dict], first: int, max_new_tokens: int, greedy: bool,
              temperature: float) -> list[EpisodeResult]:  # fmt: skip
    """One episode per row; each turn one batched ``generate`` of the running episodes (seeds: the row index)."""
    stop_ids = {tokenizer.eos_token_id, tokenizer.pad_token_id}

    def turns(prompt_ids: list[list[int]], rows: list[int]):
        return _generate_ids(model, tokenizer, prompt_ids, max_new_tokens, greedy, temperature), None

    seeds = [first + i for i in range(len(rows))]
    return run_episodes(env, rows, seeds, ChatRenderer(tokenizer), turns, stop_ids)


@contextmanager
def fast_generation(model, rows: int) -> Iterator[None]:
    """Held-out generation as fast as the rollouts': the preallocated KV cache (rlpost/generation/kv_cache.py) and,
    where the trainer routed the linears through oneDNN, their weights packed once for ``rows``-row
    inputs (rlpost/generation/onednn.py; a no-op on a model it did not route). The tokens do not change."""
    with onednn.packed_weights(model, rows), preallocated_generation(model):
        yield


def _generate_ids(
    model, tokenizer, prompt_ids: list[list[int]], max_new_tokens: int, greedy: bool, temperature: float
) -> list[list[int]]:
    """Left-padded batch generation from token ids; each completion cut after its first EOS."""
    pad = tokenizer.pad_token_id
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompt_ids):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature}
    with fast_generation(model, ids.size(0)):
        out = model.generate(
            input_ids=ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=max_new_tokens,
            pad_token_id=pad, **sampling,
        )  # fmt: skip
    completions = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t == tokenizer.eos_token_id), len(row))
        completions.append(row[:cut])
    return completions


def _mean_by(values: torch.Tensor, keys: list, metric: str = "eval/accuracy") -> dict[str, float]:
    """Mean of ``values`` [N] (NaN rows skipped) per distinct key, as ``<metric>/<key>``."""
    by_key: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(str(key), []).append(i)
    return {f"{metric}/{k}": torch.nanmean(values[idx]).item() for k, idx in sorted(by_key.items())}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt with ``c`` correct out of ``n`` samples: ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 < k <= n:
        raise ValueError(f"pass@k needs 0 < k <= n, got k={k}, n={n}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_correct(answers: list[str | None], correct: list[bool]) -> bool:
    """One prompt's samples: the most frequent extracted answer (None: no answer, no vote; ties: the answer
    seen first) is right when the first sample giving it is correct. No answer at all: wrong."""
    counts: dict[str, int] = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    if not counts:
        return False
    top = max(counts.values())
    winner = next(a for a in answers if a is not None and counts[a] == top)
    return correct[answers.index(winner)]


def sample_metrics(
    scores: torch.Tensor,
    combine: Combine,
    lengths: torch.Tensor,
    ks: list[int],
    correct: Correctness | None,
    prefix: str,
    answers: list[list[str | None]] | None = None,
) -> dict[str, float]:
    """Metrics of ``n`` samples per prompt: scores ``[P, n, R]`` (NaN = unscorable), lengths ``[P, n]``.

    With a correctness criterion ``correct``: accuracy (the share of scored samples that are correct);
    avg@n (mean over prompts of the share of correct samples); pass@k per k <= n (and k = n); headroom
    (pass@n - pass@1); with ``answers`` ``[P][n]`` (each sample's extracted final answer), maj@k per
    k <= n: the majority answer of the first k samples is correct (``majority_correct``; one draw of k,
    not an average over subsets). Always: reward (mean of the combined reward, ``combine`` over each
    prompt's group of n); reward_best@k per k <= n (and k = n: the mean over prompts of the highest reward
    among the first k samples, one draw of k, NaN samples skipped: the best-of-k score of discovery and
    search tasks); reward_std (mean over prompts of the population std of the reward within the
    group); signal_fraction (prompts whose group rewards are not all equal: GRPO gets a non-zero
    advantage); mean_length in tokens.
    """
    n = scores.size(1)
    reward = combine(scores.reshape(-1, scores.size(2)), n)[0].view(scores.size(0), n)  # [P, n]
    spread = torch.stack(
        [r[~torch.isnan(r)].std(unbiased=False) if (~torch.isnan(r)).sum() > 1 else r.new_zeros(()) for r in reward]
    )
    out: dict[str, float] = {f"{prefix}/samples_per_prompt": n}
    if correct is not None:
        right = correct.correct(scores)  # [P, n]; unscorable = wrong
        counts = right.sum(dim=1).tolist()
        out[f"{prefix}/accuracy"] = correct.accuracy(scores.reshape(-1, scores.size(2)))
        out[f"{prefix}/avg@{n}"] = sum(counts) / (n * len(counts))
        for k in sorted({*(k for k in ks if k <= n), n}):
            out[f"{prefix}/pass@{k}"] = sum(pass_at_k(n, c, k) for c in counts) / len(counts)
            if answers is not None:
                votes = [majority_correct(a[:k], r[:k]) for a, r in zip(answers, right.tolist())]
                out[f"{prefix}/maj@{k}"] = sum(votes) / len(votes)
        out[f"{prefix}/headroom"] = out[f"{prefix}/pass@{n}"] - out[f"{prefix}/pass@1"]
    out[f"{prefix}/reward"] = torch.nanmean(reward).item()
    for k in sorted({*(k for k in ks if k <= n), n}):  # best-of-k: the first k samples' highest reward, averaged
        best = torch.nan_to_num(reward[:, :k], nan=float("-inf")).max(dim=1).values
        out[f"{prefix}/reward_best@{k}"] = torch.nanmean(torch.where(torch.isinf(best), float("nan"), best)).item()
    out[f"{prefix}/reward_std"] = spread.mean().item()
    out[f"{prefix}/signal_fraction"] = (spread > 1e-6).float().mean().item()
    out[f"{prefix}/mean_length"] = lengths.float().mean().item()
    out[f"{prefix}/num_prompts"] = scores.size(0)
    return out


@torch.no_grad()
def evaluate_sampled(
    model: torch.nn.Module,
    tokenizer: Any,
    dataset: Any,
    reward_funcs: list[Callable],
    combine: Combine,
    *,
    n: int,
    ks: list[int],
    max_new_tokens: int,
    correct: Correctness | None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    batch_size: int = 50,
    size: int | None = None,
    prefix: str = "sampled",
    show_progress: bool = True,
    majority_answer: str | None = "last_number",
    calibration: str | None = None,
    calibration_level: float = 0.8,
) -> dict[str, float]:
    """Sample ``n`` completions per prompt (``batch_size`` completions per generate call) -> ``sample_metrics``;
    ``majority_answer`` (last_number | boxed | text, rlpost/rewards/group.py; None: no maj@k) extracts the
    answer each sample votes for; ``calibration``, the column of numeric targets, adds
    ``<prefix>/calibration/*`` over each prompt's n predictions (their last numbers)."""
    rows = [dataset[i] for i in range(min(size or len(dataset), len(dataset)))]
    was_training = model.training
    model.eval()
    completions, lengths = [], []
    per_call = max(1, batch_size // n)
    with Progress(transient=True, disable=not show_progress) as progress:
        task = progress.add_task(f"{prefix} x{n}", total=len(rows))
        for start in range(0, len(rows), per_call):
            chunk = rows[start : start + per_call]
            texts, n_tokens = _generate(
                model, tokenizer, [r["prompt"] for r in chunk], max_new_tokens, False, temperature, n=n, top_p=top_p
            )
            completions += texts
            lengths += n_tokens
            progress.advance(task, len(chunk))
    model.train(was_training)
    scores = score(rows, completions, n, reward_funcs).view(len(rows), n, len(reward_funcs))
    answers = None
    if majority_answer is not None:  # each sample's final answer, for maj@k
        flat = [extract_answer(c, majority_answer) for c in completions]
        answers = [flat[p * n : (p + 1) * n] for p in range(len(rows))]
    lengths_t = torch.tensor(lengths).view(len(rows), n)
    result = sample_metrics(scores, combine, lengths_t, ks, correct, prefix, answers)
    if calibration is not None:
        predictions = [
            [last_number(answer_text(c, True)) for c in completions[p * n : (p + 1) * n]] for p in range(len(rows))
        ]
        targets = [gold_number(r.get(calibration)) for r in rows]
        calibrated = calibration_scores(predictions, targets, calibration_level)
        result.update({f"{prefix}/calibration/{name}": value for name, value in calibrated.items()})
    return result


def _generate(
    model,
    tokenizer,
    prompts: list,
    max_new_tokens: int,
    greedy: bool,
    temperature: float,
    n: int = 1,
    top_p: float = 1.0,
):
    """Left-padded batch generation, ``n`` completions per prompt (prompt-major); decoded texts and token counts."""
    if isinstance(prompts[0], list):
        prompts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    tokenizer.padding_side = side
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature, "top_p": top_p}
    with fast_generation(model, enc["input_ids"].size(0) * n):
        out = model.generate(
            **enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, num_return_sequences=n,
            **sampling,
        )  # fmt: skip
    new = out[:, enc["input_ids"].size(1) :]
    eos = tokenizer.eos_token_id
    lengths = [int(((row != eos).cumprod(0)).sum().item()) + int((row == eos).any().item()) for row in new]
    texts = [tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(new, lengths)]
    return texts, lengths
