"""Secrets never leave the environment: redaction of config dumps, overrides and log records.

rlpost reads API keys only from environment variables (a judge config holds the variable's *name*,
``api_key_env``). Should a secret still reach a config value (``${oc.env:OPENAI_API_KEY}`` in a
prompt, a ``+judge.api_key=...`` override), every dump rlpost writes or prints (config.yaml,
overrides.yaml, ``rlpost show``, ``rlpost train --cfg job``), every log record and the tracker
config pass through here first. Two rules, either suffices:
- by key: a value whose key names a secret (``api_key``, ``token``, ``secret``, ``password``...,
  but not ``api_key_env`` or ``max_tokens``) becomes ``REDACTED``;
- by value: any string containing the value of a secret-looking environment variable
  (``*API_KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``; 8 characters or more) has it replaced.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

REDACTED = "REDACTED"
SECRET_KEY = re.compile(
    r"(?i)^(.*[_-])?(api[_-]?key|apikey|secret|password|passwd|token|access[_-]?token|auth|bearer|credentials?)$"
)
SECRET_ENV = re.compile(r"(?i)(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)")
MIN_SECRET_LEN = 8


def secret_values() -> list[str]:
    """Values of secret-looking environment variables, longest first."""
    values = {v for k, v in os.environ.items() if SECRET_ENV.search(k) and len(v) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, values: list[str] | None = None) -> str:
    for value in secret_values() if values is None else values:
        text = text.replace(value, REDACTED)
    return text


def is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(SECRET_KEY.match(key))


def redact(obj: Any, values: list[str] | None = None) -> Any:
    """A copy of a plain config container (dicts, lists, scalars) with secrets replaced."""
    values = secret_values() if values is None else values
    if isinstance(obj, dict):
        return {k: REDACTED if is_secret_key(k) and v is not None else redact(v, values) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v, values) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj, values)
    return obj


def redact_override(override: str) -> str:
    """``a.api_key=sk-...`` -> ``a.api_key=REDACTED``; any secret value inside is replaced too."""
    key, sep, value = override.partition("=")
    if sep and is_secret_key(key.lstrip("+~").rsplit(".", 1)[-1]):
        return f"{key}={REDACTED}"
    return redact_text(override)


def redacted_yaml(cfg: Any) -> str:
    """The resolved config (without ``hydra``) as YAML, secrets redacted."""
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=True) if not isinstance(cfg, dict) else dict(cfg)
    container.pop("hydra", None)
    return OmegaConf.to_yaml(OmegaConf.create(redact(container)))


class RedactingFilter(logging.Filter):
    """Replaces secret values in every record's rendered message (installed on the root handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        values = secret_values()
        if values:
            message = record.getMessage()
            cleaned = redact_text(message, values)
            if cleaned != message:
                record.msg, record.args = cleaned, ()
        return True


def install_log_redaction() -> None:
    """Add a ``RedactingFilter`` to every handler of the root logger (once)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
