"""Secrets stay in the environment: config dumps, overrides, `rlpost show`, `--cfg job` and logs
redact them (rlpost/core/secrets.py); remote code and pickle weights are off by default."""

from __future__ import annotations

import logging

from rlpost import app, cli
from rlpost.build import build_run
from rlpost.core.secrets import REDACTED, RedactingFilter, redact, redact_override
from rlpost.models.loading import ModelConfig
from rlpost.runs.rundir import RunDirectory

SECRET = "sk-test-0123456789abcdef"
LEAK = "data.system_prompt=${oc.env:MY_SERVICE_API_KEY}"  # a secret interpolated into a plain value


def test_redact_by_key_and_by_value(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", SECRET)
    cfg = {
        "judge": {"api_key": "literal-key-123", "api_key_env": "MY_SERVICE_API_KEY", "max_tokens": 4},
        "prompt": f"use {SECRET} please",
        "terms": [{"token": "abc"}, {"pad_token": None}],
    }
    assert redact(cfg) == {
        "judge": {"api_key": REDACTED, "api_key_env": "MY_SERVICE_API_KEY", "max_tokens": 4},
        "prompt": f"use {REDACTED} please",
        "terms": [{"token": REDACTED}, {"pad_token": None}],
    }
    assert (
        redact_override("+reward.terms.0.params.judge.api_key=abc123")
        == f"+reward.terms.0.params.judge.api_key={REDACTED}"
    )
    assert redact_override(f"data.system_prompt={SECRET}") == f"data.system_prompt={REDACTED}"
    assert redact_override("train.steps=3") == "train.steps=3"


def test_show_and_cfg_job_never_print_the_secret(no_launch, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MY_SERVICE_API_KEY", SECRET)
    assert cli.main(["show", "model=tiny-random", LEAK]) == 0
    shown = capsys.readouterr().out
    assert SECRET not in shown and f"system_prompt: {REDACTED}" in shown
    assert cli.main(["train", "--cfg", "job", "--resolve", "model=tiny-random", LEAK]) == 0  # Hydra never launched
    printed = capsys.readouterr().out
    assert SECRET not in printed and f"system_prompt: {REDACTED}" in printed and "tiny_random" in printed


def test_run_directory_config_files_are_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", SECRET)
    cfg = app.compose(["model=tiny-random", LEAK])
    build_run(cfg)  # a valid run
    rundir = RunDirectory(tmp_path)
    rundir.write_config(cfg, [LEAK, f"+some.api_key={SECRET}"])
    for name in ("config.yaml", "overrides.yaml"):
        text = (tmp_path / name).read_text()
        assert SECRET not in text and REDACTED in text, name


def test_log_records_are_redacted(monkeypatch, caplog):
    monkeypatch.setenv("MY_SERVICE_API_KEY", SECRET)
    logger = logging.getLogger("rlpost.test_secrets")
    caplog.handler.addFilter(RedactingFilter())
    logger.warning("judge call failed with key %s", SECRET)
    assert SECRET not in caplog.text and f"with key {REDACTED}" in caplog.text


def test_remote_code_and_pickle_are_off_by_default():
    cfg = ModelConfig(source="hf", path="/some/model")
    assert cfg.trust_remote_code is False and cfg.safetensors_only is True
