"""Prompt data sets and task generators: reasoning-gym, local files and ``datasets`` sources (``sources.py``),
offline benchmarks, and the generated tasks of the bundled recipes.
"""
