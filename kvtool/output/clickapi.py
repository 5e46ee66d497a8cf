"""click, as the installed typer provides it: recent typer releases vendor it as
``typer._click``, older ones depend on the ``click`` package."""

from __future__ import annotations

try:
    from typer._click.core import ParameterSource
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - depends on the typer release installed
    from click.core import ParameterSource  # type: ignore[no-redef,assignment,unused-ignore]
    from click.exceptions import ClickException  # type: ignore[no-redef,assignment,unused-ignore]

__all__ = ["ClickException", "ParameterSource"]
