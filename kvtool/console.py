"""The one place human output is written: a rich console on stderr.

Machine formats (JSON, SARIF, emitted configs) go to stdout through
:func:`typer.echo` or ``sys.stdout`` so they can be piped.
"""

from rich.console import Console

stderr = Console(stderr=True, highlight=False)
