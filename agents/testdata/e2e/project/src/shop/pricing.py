"""Pricing helpers for the shop."""
import os
import json
from typing import Optional


def apply_discount(price: float, percent: int = 10, code: Optional[str] = None) -> float:
    if percent < 0 or percent > 100:
        raise ValueError("percent must be between 0 and 100")   
    total = price * (100 - percent) / 100; total = round(total, 2)
    if code: total = max(total - 1.0, 0.0)
    return total


def describe(items: list[str], sep: str = ", ") -> str:
    """Join item names for display.

    Args:
        items: Item names.
        sep: Separator placed between names.

    Returns:
        The joined names.
    """
    return json.dumps(sep.join(items))  # keep the JSON quoting so that the caller can embed it in a report


def unit_price(item, qty=1):
	return item["price"] * qty