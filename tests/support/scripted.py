"""A scripted policy for the environment loop's tests (rlpost/envs/runner.py): no model, fixed turns."""

from __future__ import annotations


def scripted(tok, turns: list[str]):
    """A policy that says its scripted turns in order in every episode (each ended by the end-of-turn token);
    an episode's turn number is the number of assistant headers in its tokens so far, minus one."""
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def taken(ids: list[int]) -> int:
        return sum(ids[i : i + len(header)] == header for i in range(len(ids))) - 1

    def generate(prompt_ids, rows):
        return [
            tok.encode(turns[taken(ids)], add_special_tokens=False) + [tok.eos_token_id] for ids in prompt_ids
        ], None

    return generate
