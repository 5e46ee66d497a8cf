"""The CLI root's console for errors on stderr (``kvtool: error: ...``).

Commands write through :mod:`kvtool.output` instead: the report to stdout or
``-o/--output-file``, chatter on stderr under ``-q`` and ``--color``. Errors are printed
without markup, so they carry no escape codes whatever the terminal.
"""

from rich.console import Console

stderr = Console(stderr=True, highlight=False, emoji=False)
