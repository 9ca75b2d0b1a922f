"""``python -m`` generators of docs tables and bundled data, and the import-graph check: never imported at
run time.
"""
