"""``fluidjax COMMAND`` / ``python -m fluidjax COMMAND``: the command line (see ``fluidjax/frontend/cli.py``)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (130 after a Ctrl-C, as a shell reports it,
    also one that lands while the package is still being imported)."""
    try:
        from .frontend.cli import main as cli_main
    except KeyboardInterrupt:
        print("fluidjax: interrupted", file=sys.stderr)
        return 130
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
