"""Shop package."""
