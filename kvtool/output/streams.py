"""Consoles for the report (stdout or ``-o``) and for chatter (stderr), per the contract.

Colour: ``never`` (or ``NO_COLOR`` under ``auto``) builds consoles without a colour
system, which is what makes rich emit no escape code at all (its own ``no_color`` keeps
bold and dim). ``always`` (or ``FORCE_COLOR`` under ``auto``) forces a terminal.
Width: a stream that is not a terminal gets :data:`UNBOUNDED_WIDTH`, so rich neither
wraps nor cuts a table cell, a path or a URL.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rich.console import Console

from kvtool.output.options import ColorMode

# Wide enough for any line kvtool prints; rich pads nothing to it (tables do not expand).
UNBOUNDED_WIDTH = 100_000


def _env_set(name: str) -> bool:
    """NO_COLOR and FORCE_COLOR count when set to a non-empty value (no-color.org)."""
    return bool(os.environ.get(name))


def wants_color(mode: ColorMode, stream: IO[str]) -> bool | None:
    """True: force escapes; False: none; None: let rich decide from the terminal."""
    if mode is ColorMode.never:
        return False
    if mode is ColorMode.always:
        return True
    if _env_set("NO_COLOR"):
        return False
    if _env_set("FORCE_COLOR"):
        return True
    return None


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def make_console(
    stream: IO[str] | None, mode: ColorMode, *, stderr: bool = False, quiet: bool = False
) -> Console:
    """A console on ``stream`` (None: the live sys.stdout or sys.stderr) under ``mode``."""
    live = stream if stream is not None else (sys.stderr if stderr else sys.stdout)
    color = wants_color(mode, live)
    # No :name: emoji codes: a file or flag name holding one is shown as written (and
    # their table would cost every run's start-up).
    kwargs: dict[str, Any] = {"highlight": False, "quiet": quiet, "emoji": False}
    if color is False:
        kwargs["color_system"] = None
    elif color is True:
        kwargs["force_terminal"] = True
    if color is not True and not _isatty(live):
        kwargs["width"] = UNBOUNDED_WIDTH
    if stream is not None:
        kwargs["file"] = stream
    else:
        kwargs["stderr"] = stderr
    return Console(**kwargs)


@dataclass(frozen=True)
class Output:
    """Where a command's report and chatter go; built from the shared options."""

    output_file: Path | None = None
    quiet: bool = False
    color: ColorMode = ColorMode.auto
    file_mode: int | None = None  # the mode of a new ``-o`` file (a start script: 0o755)

    @property
    def chatter(self) -> Console:
        """Progress and notes on stderr; silent under ``--quiet``."""
        return make_console(None, self.color, stderr=True, quiet=self.quiet)

    @property
    def warnings(self) -> Console:
        """Warnings on stderr, shown even under ``--quiet``."""
        return make_console(None, self.color, stderr=True)

    @contextmanager
    def report_console(self) -> Iterator[Console]:
        """A console for a text report: stdout, or the ``-o`` file (never coloured)."""
        if self.output_file is None:
            with _naming_stdout():
                yield make_console(None, self.color)
            return
        import io

        from kvtool.fsio import atomic_write_text

        buffer = io.StringIO()
        yield make_console(buffer, ColorMode.never)
        # Never a half-written report.
        atomic_write_text(self.output_file, buffer.getvalue(), mode=self.file_mode)

    def write(self, text: str) -> None:
        """Write a machine document (JSON, SARIF, ...) to stdout or the ``-o`` file."""
        if self.output_file is None:
            with _naming_stdout():
                sys.stdout.write(text)
                sys.stdout.flush()
        else:
            from kvtool.fsio import atomic_write_text

            atomic_write_text(self.output_file, text, mode=self.file_mode)


@contextmanager
def _naming_stdout() -> Iterator[None]:
    """A failed write to stdout (a full disk, a file-size limit) as one line naming it;
    the error itself carries no file name to show."""
    try:
        yield
    except BrokenPipeError:
        raise  # the reader went away (``| head``): rich and Python end quietly
    except OSError as error:
        from kvtool.errors import KvtoolError

        reason = error.strerror or error.__class__.__name__
        raise KvtoolError(f"cannot write the report to standard output: {reason}") from None
