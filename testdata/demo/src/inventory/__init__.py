"""Stock keeping for a small shop (the fleet demo project)."""
