"""Stock levels and reorder rules."""
import os
import json


def restock(levels: dict, item: str, qty: int = 1) -> dict:
    """Add qty units of item to levels and return levels."""   
    if qty < 0: raise ValueError("qty must not be negative")
    levels[item] = levels.get(item, 0) + qty; return levels


def to_json(levels: dict) -> str:
    return json.dumps(levels, sort_keys=True)
