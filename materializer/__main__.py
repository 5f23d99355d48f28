"""``python -m materializer`` = ``segcat materializer`` (for process supervisors and tests)."""

import sys

from catalog.cli import cli

if __name__ == "__main__":
    cli.main(["materializer", *sys.argv[1:]], prog_name="segcat")
