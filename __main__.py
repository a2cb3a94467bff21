"""``python -m fluidjax demo``: run the demo (see ``fluidjax/demo.py``)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the demo; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] != "demo":
        print("usage: python -m fluidjax demo [--steps N] [--batch N] [--quiet]")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    from . import demo

    return demo.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
