"""The ``jaxrl`` command line (placeholder until subcommands land)."""

import sys


def main(argv=None) -> int:
    print("jaxrl: no subcommands yet", file=sys.stderr)
    return 2
