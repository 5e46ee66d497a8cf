"""``kvtool inspect-image``: does a vLLM image bundle LMCache, NIXL and Mooncake?"""

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from kvtool.image.connectors import Connector
from kvtool.output.options import (
    ColorMode,
    ColorOption,
    OutputFileOption,
    OutputFormatOption,
    QuietOption,
    TextOrJson,
)

MOST_PROBE_S = 86_400  # a probe still running after a day is stuck, not slow


class Check(str, Enum):
    build_flag = "build-flag"
    runtime = "runtime"
    all = "all"


def inspect_image(
    image: Annotated[
        str | None,
        typer.Argument(
            help="Image reference (repo:tag, host:port/repo:tag, repo@sha256:...), a docker save "
            "or OCI archive, "
            "or an OCI layout directory.",
            show_default=False,
        ),
    ] = None,
    check: Annotated[
        Check | None,
        typer.Option(
            help="build-flag: read INSTALL_KV_CONNECTORS from the config (no pull); runtime: "
            "import the packages inside the image (or --python); all: both. "
            "Default: build-flag, or runtime with --python.",
            show_default=False,
        ),
    ] = None,
    platform: Annotated[
        str,
        typer.Option(
            help="Platform to pick from a multi-platform image: os/arch or os/arch/variant."
        ),
    ] = "linux/amd64",
    python: Annotated[
        Path | None,
        typer.Option(help="Run the runtime probe with this local Python instead of a container."),
    ] = None,
    connector: Annotated[
        list[Connector] | None,
        typer.Option(help="Connector to verify (repeatable). Default: all three."),
    ] = None,
    username: Annotated[
        str | None, typer.Option(help="Registry user name; the password comes from stdin.")
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the registry password from stdin.")
    ] = False,
    insecure: Annotated[
        bool,
        typer.Option(help="Plain HTTP to the registry (always so for localhost and 127.0.0.1)."),
    ] = False,
    ref: Annotated[
        str | None,
        typer.Option(help="Which image of a multi-image archive or layout (tag or ref name)."),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Neither read nor write the config cache.")
    ] = False,
    gpus: Annotated[
        bool, typer.Option(help="Give the probe container every GPU (needed for libcuda).")
    ] = False,
    probe_timeout: Annotated[
        float, typer.Option(help="Seconds the runtime probe may take.", min=1)
    ] = 300.0,
    probe_python: Annotated[
        str, typer.Option(help="The interpreter inside the image that runs the probe.")
    ] = "python3",
    probe_memory: Annotated[
        str, typer.Option(help="Memory limit of the probe container, e.g. 4g.")
    ] = "4g",
    max_config_bytes: Annotated[
        int, typer.Option(help="Refuse config blobs larger than this.", min=1024)
    ] = 8 * 1024 * 1024,
    output_format: OutputFormatOption = TextOrJson.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Verdict per KV connector: bundled, not-bundled, broken or unknown.

    Exit 0 when every requested connector is bundled, 1 when one is not bundled,
    broken or inconclusive, 2 when a step could not run (auth, network, engine).
    """
    from kvtool.errors import KvtoolError
    from kvtool.image.auth import Credentials
    from kvtool.image.inspect import InspectRequest, ReadOptions, inspect
    from kvtool.image.manifest import Platform
    from kvtool.image.render import INSPECT_IMAGE
    from kvtool.image.runtime import ContainerLimits
    from kvtool.output.errors import bad_option
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output
    from kvtool.termsafe import plain, terminal_line

    out = Output(output_file=output_file, quiet=quiet, color=color)

    if (username is None) != (not password_stdin):
        raise KvtoolError("--username and --password-stdin go together")
    credentials = None
    if username is not None:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise KvtoolError("--password-stdin: stdin held no password")
        credentials = Credentials(username, password)
    if not 1 <= probe_timeout <= MOST_PROBE_S:  # nan fails both; click lets nan and inf in
        why = f"must be a number of seconds from 1 to {MOST_PROBE_S}"
        raise bad_option("--probe-timeout", probe_timeout, why)
    chosen = check or (Check.runtime if python is not None else Check.build_flag)
    if chosen is not Check.build_flag and image is None and python is None:
        raise KvtoolError("the runtime check needs an IMAGE or --python PATH")
    request = InspectRequest(
        image=image,
        build_flag=chosen is not Check.runtime,
        runtime=chosen is not Check.build_flag,
        python=python,
        connectors=list(connector) if connector else list(Connector),
        read=ReadOptions(
            platform=Platform.parse(platform),
            credentials=credentials,
            insecure=insecure,
            use_cache=not no_cache,
            max_config_bytes=max_config_bytes,
            ref_name=ref,
        ),
        limits=ContainerLimits(
            memory=probe_memory, timeout_s=probe_timeout, gpus=gpus, python=probe_python
        ),
    )
    with out.chatter.status("inspecting", spinner="dots") as status:
        # Progress names what the registry and the archive said: plain text, escaped.
        report = inspect(request, progress=lambda text: status.update(plain(text)))
    emit(INSPECT_IMAGE, report, output_format.value, out)
    for step in (report.build_flag_step, report.runtime_step):
        if step.status == "failed":
            out.warnings.print(
                f"kvtool: error: {terminal_line(step.reason or '')}", markup=False, soft_wrap=True
            )
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    """Add ``inspect-image`` to the root app."""
    app.command("inspect-image")(inspect_image)
