"""manipulation ops (being written)."""
