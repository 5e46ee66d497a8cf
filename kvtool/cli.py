"""The ``kvtool`` command line: one root Typer app; each command lives in its sub-package.

Every sub-package exposes ``command.register(app)``, which adds its commands.
Command modules import only typer at module level so ``kvtool --help`` stays fast;
heavy libraries are imported inside the command that needs them.
"""

import sys
from typing import Annotated

import typer

from kvtool import __version__
from kvtool.audit import command as audit_command
from kvtool.console import stderr
from kvtool.errors import KvtoolError
from kvtool.image import command as image_command
from kvtool.launch import command as launch_command
from kvtool.simulate import command as simulate_command
from kvtool.sizing import command as sizing_command
from kvtool.verify import command as verify_command

app = typer.Typer(
    name="kvtool",
    help="Audit, size, inspect, launch and verify vLLM deployments with KV-cache offload.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kvtool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """Audit, size, inspect, launch and verify vLLM deployments with KV-cache offload."""


for _module in (
    audit_command,
    sizing_command,
    image_command,
    launch_command,
    verify_command,
    simulate_command,
):
    _module.register(app)


def run(args: list[str]) -> int:
    """Run the CLI on ``args`` and return the exit code (0 ok, 1 findings, 2 bad input)."""
    try:
        app(args=args, prog_name="kvtool", standalone_mode=True)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except KvtoolError as exc:
        stderr.print(f"kvtool: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        stderr.print(f"kvtool: error: {exc.strerror}: {exc.filename}", markup=False, soft_wrap=True)
        return 2
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))
