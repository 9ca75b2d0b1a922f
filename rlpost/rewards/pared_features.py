"""The response-level features of ``pared`` (PARED, seed 000 #17): functions of (prompt x, response y), each in
[0, 1]. ``words(t)`` = ``t.split()``; ``N(t)`` = the distinct numeric values written in t (math_answer's
``NUMBER``, thousands commas dropped); ``W(t)`` = t's distinct lower-cased content words (word_recall's
``content_words``: 4+ letters, a few function words removed).

Surface features (of y alone)::

    length          min(|words(y)| / length_scale, 1)
    unique_ratio    distinct lower-cased words / |words(y)|
    mean_word_len   min(mean word characters / 10, 1)
    punct_rate      punctuation characters / non-space characters
    digit_rate      digit characters / non-space characters
    newline_rate    min(newlines / |words(y)|, 1)
    ends_sentence   1 when the stripped y ends in ".", "!", "?" or a closing fence

Prompt-aware features (of x and y: they let the discriminator relate a response to the question it answers)::

    prompt_overlap       |W(y) & W(x)| / |W(y)|             share of y's content words found in the prompt
    prompt_numbers_used  |N(x) & N(y)| / |N(x)|             share of the prompt's numbers that y mentions
    new_numbers          |N(y) - N(x)| / |N(y)|             share of y's numbers the prompt does not hold
    length_ratio         r / (1 + r), r = |words(y)| / max(|words(x)|, 1)   0.5 at equal length, -> 1 as y grows

A ratio with an empty denominator (no words, no numbers) is 0. These are lexical: they tell an answer that
echoes the question from one that states a result of its own, but not a right result from a wrong one
(``pared``'s ``feedback`` judge criteria are the dimension that can).
"""

from __future__ import annotations

import string

from rlpost.rewards.math_answer import NUMBER
from rlpost.rewards.word_recall import content_words

SURFACE = ("length", "unique_ratio", "mean_word_len", "punct_rate", "digit_rate", "newline_rate", "ends_sentence")
PROMPT = ("prompt_overlap", "prompt_numbers_used", "new_numbers", "length_ratio")
FEATURES = SURFACE + PROMPT


def numbers(text: str) -> set[float]:
    """The distinct numeric values written in ``text`` (``"5 * 33 = 1,650"`` -> {5, 33, 1650})."""
    return {float(n.replace(",", "")) for n in NUMBER.findall(text)}


def share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def features(text: str, names: tuple[str, ...], length_scale: float, prompt: str = "") -> list[float]:
    """Features ``[F]`` (module docstring), one per name, of the response ``text`` to ``prompt``."""
    words = text.split()
    chars = [c for c in text if not c.isspace()]
    values: dict[str, float] = {}
    for name in names:
        if name == "length":
            values[name] = min(len(words) / length_scale, 1.0)
        elif name == "unique_ratio":
            values[name] = share(len({w.lower() for w in words}), len(words))
        elif name == "mean_word_len":
            values[name] = min(share(sum(map(len, words)), len(words)) / 10, 1.0)
        elif name == "punct_rate":
            values[name] = share(sum(c in string.punctuation for c in chars), len(chars))
        elif name == "digit_rate":
            values[name] = share(sum(c.isdigit() for c in chars), len(chars))
        elif name == "newline_rate":
            values[name] = min(share(text.count("\n"), len(words)), 1.0)
        elif name == "ends_sentence":
            values[name] = float(text.strip().endswith((".", "!", "?", "```")))
        elif name == "prompt_overlap":
            own = content_words(text, 4)
            values[name] = share(len(own & content_words(prompt, 4)), len(own))
        elif name == "prompt_numbers_used":
            asked = numbers(prompt)
            values[name] = share(len(asked & numbers(text)), len(asked))
        elif name == "new_numbers":
            own_numbers = numbers(text)
            values[name] = share(len(own_numbers - numbers(prompt)), len(own_numbers))
        elif name == "length_ratio":
            ratio = len(words) / max(len(prompt.split()), 1)
            values[name] = ratio / (1 + ratio)
        else:
            raise KeyError(f"unknown pared feature {name!r}; choices: {', '.join(FEATURES)}")
    return [values[name] for name in names]
