"""``kvtool verify``: does the KV offload tier serve hits, and if not, why."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvtool.output.options import (
    ColorMode,
    ColorOption,
    OutputFileOption,
    OutputFormatOption,
    QuietOption,
    TextOrJson,
)

if TYPE_CHECKING:
    from kvtool.output.streams import Output

MOST_INTERVAL_S = 86_400  # a day: traffic between two scrapes is a matter of minutes


def _read(path: Path, what: str) -> str:
    """A snapshot or log: a regular file within the input size limit (a FIFO or
    /dev/zero would hang or fill memory), its stray non-UTF-8 bytes replaced."""
    from kvtool.errors import KvtoolError
    from kvtool.fsio import read_input_bytes

    try:
        data = read_input_bytes(path)
    except KvtoolError as error:
        raise KvtoolError(f"{what} {error}") from None
    return data.decode("utf-8", errors="replace")


# How often a wait that is not on a terminal says how long is left (a CI log shows no
# spinner, and a silent job looks hung).
PROGRESS_EVERY_S = 10.0


def _wait(interval: float, out: "Output") -> None:
    """Sleep ``interval`` seconds between the scrapes, saying so: a spinner on a terminal,
    a line every PROGRESS_EVERY_S seconds otherwise (CI logs)."""
    import time

    message = f"waiting {interval:g} s for traffic before the second scrape"
    console = out.chatter
    if console.is_terminal:
        with console.status(message):
            time.sleep(interval)
        return
    console.print(f"kvtool verify: {message}", markup=False, highlight=False)
    end = time.monotonic() + interval
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, PROGRESS_EVERY_S))
        if end - time.monotonic() > 0:
            remaining = end - time.monotonic()
            console.print(f"kvtool verify: {remaining:.0f} s left", markup=False, highlight=False)
    console.print("kvtool verify: second scrape", markup=False, highlight=False)


def verify(
    metrics_url: Annotated[
        str | None, typer.Option(help="vLLM /metrics URL: scraped twice, --interval apart.")
    ] = None,
    interval: Annotated[
        float, typer.Option(help="Seconds between the two scrapes (send traffic meanwhile).")
    ] = 30.0,
    before: Annotated[Path | None, typer.Option(help="Earlier /metrics snapshot file.")] = None,
    after: Annotated[Path | None, typer.Option(help="Later /metrics snapshot file.")] = None,
    log: Annotated[Path | None, typer.Option(help="The engine's log, for root causes.")] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            help="HTTP header for --metrics-url, 'Name: value' (default: "
            "$KVTOOL_AUDIT_HEADER, else a bearer $VLLM_API_KEY); repeatable.",
        ),
    ] = None,
    output_format: OutputFormatOption = TextOrJson.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Diff two /metrics snapshots and name why the offload tier serves no hits."""

    from kvtool.errors import KvtoolError
    from kvtool.output.errors import bad_option
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output
    from kvtool.verify.diagnose import diagnose
    from kvtool.verify.prometheus import parse
    from kvtool.verify.render import VERIFY

    out = Output(output_file=output_file, quiet=quiet, color=color)
    if metrics_url is not None and (before is not None or after is not None):
        raise KvtoolError("give --metrics-url or --before/--after, not both")
    if metrics_url is not None:
        from kvtool.numbers import BadNumber, parse_float
        from kvtool.verify.scrape import scrape

        try:  # nan, inf and 1e20 too: sleep() refuses them with a traceback
            parse_float(interval, "--interval", low=0, low_inclusive=False, high=MOST_INTERVAL_S)
        except BadNumber:
            raise bad_option(
                "--interval", interval, f"must be a number of seconds > 0 and <= {MOST_INTERVAL_S}"
            ) from None
        import os

        from kvtool.http import request_headers

        headers = request_headers(header or [], os.environ)
        first = scrape(metrics_url, headers)
        _wait(interval, out)
        second = scrape(metrics_url, headers)
    elif header:
        raise KvtoolError("--header goes with --metrics-url")
    elif before is not None and after is not None:
        first = parse(_read(before, "--before"), str(before))
        second = parse(_read(after, "--after"), str(after))
    else:
        raise KvtoolError("give --metrics-url URL, or both --before FILE and --after FILE")
    report = diagnose(first, second, _read(log, "--log") if log is not None else None)
    emit(VERIFY, report, output_format.value, out)
    if not report.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``kvtool verify`` to the root app."""
    app.command("verify")(verify)
