"""The bottom floor: errors, the registry, config schemas, the component contract, secrets, jsonl, conf/ on disk.

Nothing here imports another rlpost package.
"""
