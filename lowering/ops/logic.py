"""logic ops (being written)."""
