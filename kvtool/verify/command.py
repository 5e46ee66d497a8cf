"""``kvtool verify``: does the KV offload tier serve hits, and if not, why."""

import math
from pathlib import Path
from typing import Annotated

import typer


def _read(path: Path, what: str) -> str:
    from kvtool.errors import KvtoolError

    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise KvtoolError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise KvtoolError(f"{what} {path}: cannot read: {exc.strerror}") from None


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
    output_format: Annotated[str, typer.Option(help="text | json")] = "text",
) -> None:
    """Diff two /metrics snapshots and name why the offload tier serves no hits."""
    import time

    from kvtool.console import stderr
    from kvtool.errors import KvtoolError
    from kvtool.verify.diagnose import diagnose
    from kvtool.verify.prometheus import parse
    from kvtool.verify.render import render_text

    if output_format not in ("text", "json"):
        raise KvtoolError(f"--output-format {output_format!r}: use text or json")
    if metrics_url is not None and (before is not None or after is not None):
        raise KvtoolError("give --metrics-url or --before/--after, not both")
    if metrics_url is not None:
        from kvtool.verify.scrape import scrape

        if not math.isfinite(interval) or interval <= 0:  # nan and inf too: sleep() refuses one
            raise KvtoolError(f"--interval {interval:g}: must be a finite number > 0 of seconds")
        first = scrape(metrics_url)
        with stderr.status(f"waiting {interval:g} s for traffic before the second scrape"):
            time.sleep(interval)
        second = scrape(metrics_url)
    elif before is not None and after is not None:
        first = parse(_read(before, "--before"), str(before))
        second = parse(_read(after, "--after"), str(after))
    else:
        raise KvtoolError("give --metrics-url URL, or both --before FILE and --after FILE")
    report = diagnose(first, second, _read(log, "--log") if log is not None else None)
    if output_format == "json":
        typer.echo(report.model_dump_json(indent=2))
    else:
        render_text(report)
    if not report.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``kvtool verify`` to the root app."""
    app.command("verify")(verify)
