"""A teacher with another tokenizer scores the student's completions: its log-probs per student token.

On-policy distillation (rlpost/losses/opd.py) needs ``log pi_teacher`` at every token the student
sampled. A teacher that shares the student's tokenizer scores the student's ids directly. A different
model, such as Qwen2.5-Coder-0.5B teaching SmolLM2, cuts the same text into other tokens. Here the
student's completion is decoded to text, and the teacher scores that text after its own rendering of the
prompt. Each teacher token's log-prob goes to the student token whose character span holds the teacher
token's last character::

    e_k  = end offset of student token k in the decoded completion     (cumulative decoding)
    f_j  = end offset of teacher token j in the same text              (the teacher's offset mapping)
    s(j) = min { k : e_k >= f_j }                                       the student token it ends in
    log pi_teacher[k] = sum_{j : s(j) = k} log pi_teacher(u_j | u_<j)   [T]

So the sum over a completion is exactly the teacher's log-likelihood of the text, and the per-token
reverse-KL estimate ``log pi_student(y_k) - log pi_teacher[k]`` sums to the sequence-level one. How the
sum splits over tokens is approximate at boundaries that the two tokenizers cut differently: a student
token inside a longer teacher token gets 0, and the one where that token ends gets all of it. A student
completion that ends with its end-of-sequence token gets the teacher's own end-of-turn log-prob there. The
teacher renders the prompt with its own chat template, the same messages the student saw.
"""

from __future__ import annotations

from typing import Any

import torch


def token_ends(tokenizer, ids: list[int]) -> list[int]:
    """End character offset of each token of ``ids`` in ``decode(ids)`` (cumulative decoding, so a token
    that completes a multi-byte character owns it)."""
    ends, text_len = [], 0
    for k in range(len(ids)):
        text_len = max(text_len, len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True)))
        ends.append(text_len)
    return ends


def assign(teacher_ends: list[int], student_ends: list[int]) -> list[int]:
    """For each teacher token, the index of the student token its last character falls in (the last
    student token for anything past the student's text)."""
    out, k = [], 0
    for end in teacher_ends:
        while k < len(student_ends) - 1 and student_ends[k] < end:
            k += 1
        out.append(k)
    return out


def spread(values: torch.Tensor, owners: list[int], length: int) -> torch.Tensor:
    """``values [Tt]`` summed into ``length`` student positions by ``owners`` (one index per value) -> ``[length]``."""
    out = torch.zeros(length, dtype=values.dtype)
    if len(owners):
        out.index_add_(0, torch.tensor(owners, dtype=torch.long), values)
    return out


@torch.no_grad()
def teacher_logps_for(
    teacher: Any,
    teacher_tokenizer: Any,
    prompt: Any,
    completion_ids: list[int],
    student_tokenizer: Any,
    length: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """The teacher's log-probs ``[length]`` (float32, CPU) at the student's ``completion_ids`` (unpadded, at
    most ``length``): the teacher scores the decoded text under its own rendering of ``prompt``, its logits
    divided by the sampling ``temperature`` as the student's are."""
    eos = student_tokenizer.eos_token_id
    ended = bool(completion_ids) and completion_ids[-1] == eos
    body = completion_ids[:-1] if ended else completion_ids
    text = student_tokenizer.decode(body, skip_special_tokens=True)
    if isinstance(prompt, list):
        prefix = teacher_tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    else:
        prefix = str(prompt)
    prefix_ids = teacher_tokenizer(prefix, add_special_tokens=False)["input_ids"]
    if not prefix_ids:  # an empty plain prompt: the first text token is predicted after a start token
        prefix_ids = [teacher_tokenizer.bos_token_id or teacher_tokenizer.eos_token_id]
    encoded = teacher_tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    text_ids = list(encoded["input_ids"])
    owners = assign([end for _, end in encoded["offset_mapping"]], token_ends(student_tokenizer, body))
    if ended:  # the student's end of turn <-> the teacher's
        text_ids.append(teacher_tokenizer.eos_token_id)
        owners.append(len(completion_ids) - 1)
    if not text_ids:
        return torch.zeros(length)
    device = next(teacher.parameters()).device
    ids = torch.tensor([prefix_ids + text_ids], device=device)
    logits = teacher(input_ids=ids).logits[0, len(prefix_ids) - 1 : -1].float() / temperature  # [Tt, V]
    logps = torch.log_softmax(logits, dim=-1).gather(1, ids[0, len(prefix_ids) :, None]).squeeze(1).cpu()
    return spread(logps, owners, length)
