"""Layers (being filled in; see the module's issue)."""

__all__: list[str] = []
