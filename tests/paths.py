"""Where things are, for tests in any folder under tests/ (pytest puts tests/ on sys.path: pyproject.toml)."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent  # tests/: conftest, support_*.py, trainer_utils.py
REPO = SUPPORT.parent
