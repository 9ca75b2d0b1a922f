"""``openai`` judge: any OpenAI-compatible chat-completions endpoint (OpenAI, a vLLM server, ...),
over plain HTTP with the standard library (``urllib``), no SDK.

Each judge prompt is one ``POST {base_url}/chat/completions`` with a single user message,
``temperature`` (0 by default) and ``max_tokens``. Verdicts are parsed as in ``base.py``.

Choices where nothing dictated one:
- The key is read from the environment variable named by ``api_key_env`` when the judge is built
  and kept only in a private attribute that ``repr`` does not show; it is sent as
  ``Authorization: Bearer`` and never appears in configs (they hold the variable's name), logs
  (failure reasons name the URL and status, never headers) or wandb. ``api_key_env: null`` sends no
  key (a local vLLM server). A named variable that is unset is a ConfigError before any model loads.
- Concurrency: a thread pool of ``concurrency`` workers over the batch's uncached prompts.
- Retried, with delay ``backoff_s * 2**k`` before retry k+1 (k = 0, 1, ...), up to ``retries``
  retries: connection errors (endpoint down), timeouts, HTTP 429 and 5xx, and a body that is not
  the chat-completions JSON. Other HTTP errors (400, 401, 404) fail at once: retrying cannot help.
- A reply whose verdict cannot be parsed (``malformed``) is not retried at temperature 0 (the same
  prompt gives the same reply); it is a failure and takes ``on_failure``.
- ``logprobs: true`` asks for the first token's top log-probs and scores yes/no as
  ``sigmoid(lp(Yes) - lp(No))`` (tokens compared stripped and lower-cased; a missing side takes the
  lowest listed log-prob); a server that returns none falls back to the text verdict.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.judges.base import (
    JUDGES,
    DiskCache,
    Judge,
    check_common,
    default_cache_path,
    parse_scale,
    parse_yes_no,
    yes_probability,
)


class Malformed(ValueError):
    """The endpoint answered, but not with a verdict."""


@JUDGES.register("openai")
class OpenAIJudge(Judge):
    """An OpenAI-compatible chat endpoint as a yes/no or 1-10 judge (HTTP, retries, cache)."""

    name = "openai"

    @dataclass(frozen=True)
    class Config:
        base_url: str = "http://localhost:8000/v1"  # endpoint root; /chat/completions is appended
        model: str = "gpt-4o-mini"  # the model name the endpoint serves
        api_key_env: str | None = None  # name of the env var holding the key (null: send no key)
        mode: Literal["yes_no", "scale"] = "yes_no"  # verdict format (judges/base.py)
        on_failure: Literal["skip", "zero", "abort"] = "skip"  # outcome of a prompt that failed
        max_tokens: Annotated[int, Range(ge=1)] = 4  # reply length limit
        temperature: Annotated[float, Range(ge=0)] = 0.0  # sampling temperature of the judge
        logprobs: bool = False  # score yes/no from the first token's top log-probs when returned
        timeout_s: Annotated[float, Range(gt=0)] = 30.0  # per request
        retries: Annotated[int, Range(ge=0)] = 3  # retries after the first attempt
        backoff_s: Annotated[float, Range(ge=0)] = 0.5  # delay before retry k+1 is backoff_s * 2**k
        concurrency: Annotated[int, Range(ge=1)] = 8  # requests in flight at once
        cache: bool = True  # keep responses on disk
        cache_path: str | None = None  # cache folder (null: $RLPOST_CACHE/judge)

        def __post_init__(self):
            check_common(self)
            if not self.base_url.startswith(("http://", "https://")):
                raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
            if self.timeout_s <= 0 or self.retries < 0 or self.backoff_s < 0 or self.concurrency < 1:
                raise ValueError("timeout_s must be > 0, retries and backoff_s >= 0, concurrency >= 1")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self._key = None
        if cfg.api_key_env:
            self._key = os.environ.get(cfg.api_key_env)
            if not self._key:
                raise ConfigError(
                    f"judge api_key_env={cfg.api_key_env!r}: the environment variable {cfg.api_key_env} is not "
                    "set. Export it, or set api_key_env: null for an endpoint without a key."
                )
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"
        if cfg.cache:
            self.cache = DiskCache(cfg.cache_path or default_cache_path(), f"openai|{cfg.base_url}|{cfg.model}")

    def __repr__(self) -> str:
        return f"OpenAIJudge(url={self.url!r}, model={self.cfg.model!r}, mode={self.mode!r})"

    def __getstate__(self):  # pickled reward functions (TRL's async worker) never carry the key
        state = dict(self.__dict__)
        state["_key"] = None
        state["_key_env"] = self.cfg.api_key_env
        return state

    def __setstate__(self, state):
        env = state.pop("_key_env", None)
        self.__dict__.update(state)
        self._key = os.environ.get(env) if env else None

    def _judge(self, prompts: list[str]) -> list[float | Exception]:
        with ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(prompts))) as pool:
            return list(pool.map(self._one, prompts))

    def _one(self, prompt: str) -> float | Exception:
        cfg = self.cfg
        error: Exception = RuntimeError("no attempt")
        for attempt in range(cfg.retries + 1):
            if attempt:
                time.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            try:
                return self.verdict(self._post(prompt))
            except Malformed as err:
                return err
            except urllib.error.HTTPError as err:
                error = RuntimeError(f"HTTP {err.code} from {self.url}")
                if err.code != 429 and err.code < 500:
                    return error
            except (urllib.error.URLError, TimeoutError, OSError, ValueError, KeyError, IndexError) as err:
                reason = getattr(err, "reason", None) or err
                error = RuntimeError(f"{type(err).__name__} from {self.url}: {reason}")
        return RuntimeError(f"{error} (after {cfg.retries + 1} attempts)")

    def _post(self, prompt: str) -> dict:
        """One request -> the first choice of the reply (raises on transport or JSON errors)."""
        cfg = self.cfg
        body: dict[str, Any] = {
            "model": cfg.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
        }
        if cfg.logprobs and self.mode == "yes_no":
            body.update(logprobs=True, top_logprobs=10)
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
            reply = json.loads(response.read().decode("utf-8"))
        choice = reply["choices"][0]
        if not isinstance(choice["message"]["content"], str):
            raise ValueError("reply content is not a string")
        return choice

    def verdict(self, choice: dict) -> float:
        """A chat-completions choice -> score in [0, 1]; Malformed when it holds no verdict."""
        text = choice["message"]["content"]
        if self.mode == "scale":
            score = parse_scale(text)
        else:
            score = self._logprob_verdict(choice) if self.cfg.logprobs else None
            score = parse_yes_no(text) if score is None else score
        if score is None:
            raise Malformed(f"malformed {self.mode} verdict from {self.url}: {text[:60]!r}")
        return score

    @staticmethod
    def _logprob_verdict(choice: dict) -> float | None:
        try:
            top = choice["logprobs"]["content"][0]["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            return None
        lps: dict[str, float] = {}
        for item in top:
            lps.setdefault(str(item["token"]).strip().lower(), float(item["logprob"]))
        if "yes" not in lps and "no" not in lps:
            return None
        floor = min(float(item["logprob"]) for item in top)
        return yes_probability(lps.get("yes", floor), lps.get("no", floor))
