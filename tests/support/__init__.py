"""Test helpers shared by every folder under tests/ (pytest puts tests/ on sys.path: pyproject.toml): tiny runs
and trainers (``trainer``), subprocess runs of the CLI (``runs``), rewards, environments and faults loaded by
import path as a user's own module would be (``rewards``, ``envs``, ``faults``), fixtures (``config``, ``judges``,
``rollouts``), and where things are (``paths``)."""
