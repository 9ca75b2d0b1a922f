"""Where things are, for tests in any folder under tests/ (pytest puts tests/ on sys.path: pyproject.toml)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/: conftest.py and the support package (what subprocesses import)
REPO = TESTS.parent
