"""conv ops (being written)."""
