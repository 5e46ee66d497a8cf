"""The ``kvtool`` command line: one root Typer app; each command lives in its sub-package.

Every sub-package exposes ``command.register(app)``, which adds its commands.
Command modules import only typer at module level so ``kvtool --help`` stays fast;
heavy libraries are imported inside the command that needs them. A run that names a
command registers only that command's sub-package (the lazy-subcommand pattern click
documents): typer builds every registered command's parameters on each run, which
would otherwise cost a cold ``kvtool audit`` the set-up of six commands it never runs.
"""

import importlib
import os
import sys
from typing import Annotated

import typer

from kvtool import __version__
from kvtool.console import stderr
from kvtool.errors import KvtoolError
from kvtool.output.errors import Abort, ClickException, usage_error_line

# Command name -> the module whose register() adds it.
COMMAND_MODULES = {
    "audit": "kvtool.audit.command",
    "rule": "kvtool.audit.rule_command",
    "size": "kvtool.sizing.command",
    "inspect-image": "kvtool.image.command",
    "launch": "kvtool.launch.command",
    "verify": "kvtool.verify.command",
    "simulate": "kvtool.simulate.command",
    "upgrade": "kvtool.upgrade.command",
    "flag": "kvtool.flag.command",
}
_COMPLETION_VAR = "_KVTOOL_COMPLETE"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kvtool {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """Audit, size, inspect, launch and verify vLLM deployments with KV-cache offload."""


def build_app(args: list[str]) -> typer.Typer:
    """The root app with what ``args`` can reach: the named command's sub-package when
    ``args`` start with a command name, every command otherwise (help, completion,
    ``--version``, an unknown command's error listing the real ones)."""
    app = typer.Typer(
        name="kvtool",
        help="Audit, size, inspect, launch and verify vLLM deployments with KV-cache offload.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    named = args[0] if args and _COMPLETION_VAR not in os.environ else None
    modules = (
        [COMMAND_MODULES[named]] if named in COMMAND_MODULES else COMMAND_MODULES.values()
    )
    for module in dict.fromkeys(modules):
        importlib.import_module(module).register(app)
    return app


def run(args: list[str]) -> int:
    """Run the CLI on ``args`` and return the exit code (0 ok, 1 findings, 2 bad input)."""
    from kvtool.fsio import forget_inputs
    from kvtool.limits import INT_DIGITS

    forget_inputs()  # no write of this run may replace a file it reads (kvtool.fsio)
    # Python's own guard against quadratic int parsing, set to the named, adjustable
    # limit: an integer past it in JSON, TOML or a registry answer is refused, not parsed.
    sys.set_int_max_str_digits(max(INT_DIGITS.count, 640))  # 640: the interpreter's floor
    try:
        code = build_app(args)(args=args, prog_name="kvtool", standalone_mode=False)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except ClickException as exc:  # the parser's errors, one line each like ours
        _print_error(usage_error_line(exc))
        return exc.exit_code
    except Abort:  # Ctrl-C
        return 130
    except Exception as exc:
        if not _is_input_failure(exc):
            raise
        _print_error(_error_line(exc))
        return 2
    return code if isinstance(code, int) else 0


# What hostile or broken input can raise from deep inside a reader, beside KvtoolError:
# unreadable files, bad encodings, nesting past the interpreter's stack, numbers over
# Python's digit limit, too large or otherwise malformed, memory a bound did not catch.
_INPUT_FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    UnicodeError,
    RecursionError,
    ValueError,
    MemoryError,
    OverflowError,  # a number past what float or a C call takes, that no parser bounded
)


def _is_input_failure(exc: Exception) -> bool:
    if isinstance(exc, (KvtoolError, *_INPUT_FAILURES)):
        return True
    yaml = sys.modules.get("yaml")  # a parse error of a YAML reader, if one was loaded
    return yaml is not None and isinstance(exc, yaml.YAMLError)


def _error_line(exc: BaseException) -> str:
    """One line saying what failed, for any error on the one error path."""
    if isinstance(exc, KvtoolError):
        return str(exc)
    if isinstance(exc, OSError):
        from kvtool.fsio import describe_os_error

        return describe_os_error(exc, exc.filename)
    if isinstance(exc, RecursionError):
        return "input nested too deeply to read"
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        from kvtool.limits import INT_DIGITS

        return INT_DIGITS.message("an integer in the input")
    if isinstance(exc, MemoryError):
        return "input needs more memory than is available"
    return f"invalid input: {exc}" if str(exc) else f"invalid input ({exc.__class__.__name__})"


def _print_error(message: str) -> None:
    from kvtool import redact
    from kvtool.termsafe import terminal_line

    shown = terminal_line(redact.message(message))
    stderr.print(f"kvtool: error: {shown}", markup=False, highlight=False, soft_wrap=True)


def main() -> None:
    sys.exit(run(sys.argv[1:]))
