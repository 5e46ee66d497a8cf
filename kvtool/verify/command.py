"""``kvtool verify``: does the KV offload tier serve hits, and if not, why."""

from pathlib import Path
from typing import Annotated

import typer

from kvtool.output.options import (
    ColorMode,
    ColorOption,
    OutputFileOption,
    OutputFormatOption,
    QuietOption,
    TextOrJson,
)

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
    output_format: OutputFormatOption = TextOrJson.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Diff two /metrics snapshots and name why the offload tier serves no hits."""
    import time

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
        first = scrape(metrics_url)
        with out.chatter.status(f"waiting {interval:g} s for traffic before the second scrape"):
            time.sleep(interval)
        second = scrape(metrics_url)
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
