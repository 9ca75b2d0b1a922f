"""``none``: no data transform (the default ``data/transform``): the rows as rlpost/data/sources.py formatted them."""

from __future__ import annotations

from rlpost.transforms.base import TRANSFORMS, Split, Transform


@TRANSFORMS.register("none")
class Identity(Transform):
    """No transform: the rows as data.py formatted them."""

    def __call__(self, rows: list[dict], split: Split) -> list[dict]:
        return rows
