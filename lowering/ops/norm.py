"""norm ops (being written)."""
