"""Op definitions (being filled in; see the module's issue)."""
