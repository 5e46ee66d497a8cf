"""CLI registration for this command (filled in by the issue that builds it)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this sub-package's commands to the root app."""
