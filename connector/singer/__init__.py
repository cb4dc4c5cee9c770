"""`tap-tabledata`: a Singer tap on singer-sdk, reading through our engine.

    tap-tabledata --config config.json --discover > catalog.json
    tap-tabledata --config config.json --catalog catalog.json --state state.json | target-...

The tap is `connector.singer.tap.TapTableData` (`pip install 'table-data-connector[singer]'`;
without it, importing that module raises `MissingExtra`, and the command says so on one line).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from connector.errors import ConnectorError

__all__ = ["NAME", "main"]

#: The command, and the tap's name in Singer's messages and singer-sdk's logs.
NAME = "tap-tabledata"


def main(argv: Sequence[str] | None = None) -> None:
    """The ``tap-tabledata`` command: singer-sdk's CLI; our errors (a missing extra among
    them) print as one line and exit with their `ExitCode` (``--debug``: the traceback)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        from connector.singer.tap import TapTableData

        TapTableData.cli.main(args=args, prog_name=NAME)
    except ConnectorError as exc:
        if debug:
            raise
        print(f"{NAME}: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
