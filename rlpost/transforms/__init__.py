"""Data transforms: rewrite formatted prompt rows after loading (``data.transform``, conf/data/transform/)."""
