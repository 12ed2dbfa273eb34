"""The checker's bounded memo tables: dicts keyed by a tensor's id or address that keep the newest entries.

One rule for all of them, because ids and addresses are reused: a key written again moves to the end (the
allocator hands a freed tensor's address to the next one, and a key left at its first place would be the first
evicted), and a table over its size drops its older half.
"""
from __future__ import annotations

from typing import Any


def put_newest(table: dict, key: Any, value: Any, size: int = 64) -> None:
    """table[key] = value as the newest entry; past `size` entries the older half goes."""
    table.pop(key, None)
    table[key] = value
    if len(table) > size:
        for k in list(table)[:size // 2]:
            del table[k]
