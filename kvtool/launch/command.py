"""``kvtool launch``: emit a launch config for one offload setup (a recipe)."""

from pathlib import Path
from typing import Annotated

import typer

from kvtool.output.completion import (
    complete_model,
    complete_recipe,
    complete_target,
    complete_version,
)
from kvtool.output.options import (
    ColorMode,
    ColorOption,
    OutputFileOption,
    OutputFormatOption,
    QuietOption,
    TextOrJson,
)
from kvtool.termsafe import terminal_line


def _parse_env(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    from kvtool.errors import KvtoolError
    from kvtool.launch.targets.names import check_env_name

    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise KvtoolError(f"--env {pair!r}: expected NAME=VALUE")
        parsed.append((check_env_name(key, "--env"), value))
    return tuple(parsed)


def _write(files: dict[str, str], output_dir: Path, force: bool) -> list[Path]:
    """Write each file under ``output_dir`` (``-d``); refuse to overwrite without --force."""
    from kvtool.fsio import atomic_write_text, describe_os_error, refuse_overwriting_any_input
    from kvtool.launch.targets import script_mode
    from kvtool.output.errors import bad_option

    if output_dir.exists() and not output_dir.is_dir():
        raise bad_option("--output-dir", str(output_dir), "exists and is not a directory")
    paths = [_inside(output_dir, name) for name in files]
    links = [str(p) for p in paths if p.is_symlink()]
    if links:
        raise bad_option(
            "--output-dir", str(output_dir), f"{', '.join(links)} is a symbolic link; not written"
        )
    clashes = [str(p) for p in paths if p.exists()]
    if clashes and not force:
        raise bad_option(
            "--output-dir", str(output_dir), f"would overwrite {', '.join(clashes)}; pass --force"
        )
    for path in paths:  # all checked before any is written: no half-written recipe
        refuse_overwriting_any_input(path, "--output-dir")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        why = f"cannot create: {describe_os_error(error, output_dir)}"
        raise bad_option("--output-dir", str(output_dir), why) from None
    for path, text in zip(paths, files.values(), strict=True):
        atomic_write_text(
            path, text, mode=script_mode(path), follow_symlinks=False, flag="--output-dir"
        )
    return paths


def _inside(output_dir: Path, name: str) -> Path:
    """``output_dir / name``, refused unless it names a file directly inside ``output_dir``."""
    from kvtool.errors import KvtoolError

    path = output_dir / name
    if Path(name).name != name or name in ("", ".", ".."):
        raise KvtoolError(
            f"--output-dir {output_dir}: {name!r} would be written outside the directory"
        )
    return path


def launch(
    ctx: typer.Context,
    recipe: Annotated[
        str | None,
        typer.Argument(
            help="Recipe name; `kvtool launch --list` shows them.", autocompletion=complete_recipe
        ),
    ] = None,
    serve_args: Annotated[
        list[str] | None,
        typer.Argument(help="Extra `vllm serve` arguments, after `--`.", show_default=False),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="Describe every recipe and when to pick it.")
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(help="Model vLLM serves (name or path).", autocompletion=complete_model),
    ] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel size per engine.")] = 1,
    vllm_version: Annotated[
        str | None,
        typer.Option(
            help="Target vLLM release (default: the newest table).",
            autocompletion=complete_version,
        ),
    ] = None,
    host_ram_gib: Annotated[
        float | None, typer.Option(help="Host RAM available to the engine's host, GiB.")
    ] = None,
    cpu_tier_gib: Annotated[
        float | None, typer.Option(help="CPU tier size (TP-wide total), GiB, instead of RAM.")
    ] = None,
    utilization: Annotated[
        float | None, typer.Option(help="Share of --host-ram-gib for the tier (default 0.5).")
    ] = None,
    sizing_model: Annotated[
        str | None,
        typer.Option(
            help="Catalog name or config.json for sizing, when --model is not one.",
            autocompletion=complete_model,
        ),
    ] = None,
    target: Annotated[
        str,
        typer.Option(
            help="What to write: a renderer's name (completion and the error for an unknown "
            "one list them; `kvtool launch --list` shows each recipe's).",
            autocompletion=complete_target,
        ),
    ] = "shell",
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "-d", "--output-dir", help="Write each config file into this folder, not stdout."
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite files in -d DIR.")] = False,
    entrypoint: Annotated[
        str,
        typer.Option(help="cli: `vllm serve`; module: `python -m vllm.entrypoints.openai...`."),
    ] = "cli",
    python: Annotated[str, typer.Option(help="Interpreter for --entrypoint module.")] = "python3",
    image: Annotated[
        str | None, typer.Option(help="Container image (default vllm/vllm-openai:v<version>).")
    ] = None,
    port: Annotated[int, typer.Option(help="Engine HTTP port (prefill +100, decode +200).")] = 8000,
    lmcache_port: Annotated[int, typer.Option(help="LMCache server ZMQ port.")] = 5555,
    lmcache_http_port: Annotated[
        int, typer.Option(help="LMCache server HTTP port (health probe).")
    ] = 8080,
    fs_path: Annotated[
        str, typer.Option(help="Directory of the filesystem tier.")
    ] = "/mnt/nvme/kvtool-kv",
    kaito_preset: Annotated[
        str | None, typer.Option(help="KAITO preset name (default: --model).")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Base name of services and Kubernetes objects.")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", help="NAME=VALUE for every engine (repeat).")
    ] = None,
    allow_below_security_floor: Annotated[
        bool,
        typer.Option(
            "--allow-below-security-floor",
            help="Emit a config for a release with a published vulnerability.",
        ),
    ] = False,
    output_format: OutputFormatOption = TextOrJson.text,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Emit a launch config for an offload setup: shell, compose, Kubernetes or JSON."""
    from pydantic import ValidationError

    from kvtool.errors import KvtoolError
    from kvtool.launch.plan import LaunchOptions
    from kvtool.launch.render import LAUNCH, LAUNCH_LIST
    from kvtool.launch.service import launch as run_launch
    from kvtool.launch.service import list_recipes
    from kvtool.launch.targets import script_mode
    from kvtool.output.errors import bad_option, check_choice
    from kvtool.output.kinds import emit
    from kvtool.output.streams import Output

    out = Output(
        output_file=output_file,
        quiet=quiet,
        color=color,
        file_mode=script_mode(output_file) if output_file is not None else None,
    )
    from kvtool.launch.targets import TARGETS

    check_choice("--target", target, TARGETS)
    if list_:
        emit(LAUNCH_LIST, list_recipes(), output_format.value, out)
        return
    if recipe is None:
        raise KvtoolError("name a recipe (kvtool launch --list shows them)")
    if model is None:
        raise KvtoolError("--model is required")
    check_choice("--entrypoint", entrypoint, ("cli", "module"))
    if output_dir is not None and output_file is not None:
        raise KvtoolError("give --output-dir (one file each) or --output-file (one report)")
    from kvtool.launch.targets.names import check_host_path, check_object_name
    from kvtool.output.given import given_command_line

    if name is not None:
        check_object_name(name, "--name")
    check_host_path(fs_path, "--fs-path")
    try:
        options = LaunchOptions(
            model=model,
            tp=tp,
            target=target,
            entrypoint=entrypoint,  # type: ignore[arg-type]  # checked above
            python=python,
            image=image,
            port=port,
            lmcache_port=lmcache_port,
            lmcache_http_port=lmcache_http_port,
            fs_path=fs_path,
            kaito_preset=kaito_preset,
            extra_args=tuple(serve_args or ()),
            env=_parse_env(env or []),
            name=name,
            allow_below_security_floor=allow_below_security_floor,
            command_line=given_command_line(
                ctx, "launch", ("output_file", "output_dir", "force", "quiet", "color")
            ),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "input"
        raise bad_option(flag, first.get("input"), first["msg"]) from None
    result = run_launch(
        recipe,
        options,
        vllm_version=vllm_version,
        host_ram_gib=host_ram_gib,
        cpu_tier_gib=cpu_tier_gib,
        utilization=utilization,
        sizing_model=sizing_model,
    )
    plan = result.plan
    if result.release_note:
        out.chatter.print(
            f"kvtool launch: {terminal_line(result.release_note)}", markup=False, soft_wrap=True
        )
    for warning in plan.warnings:
        out.warnings.print(
            f"kvtool launch: warning: {terminal_line(warning)}", markup=False, soft_wrap=True
        )
    if output_dir is None:
        emit(LAUNCH, result, output_format.value, out)
    else:
        for path in _write(result.files, output_dir, force):
            out.chatter.print(
                f"kvtool launch: wrote {terminal_line(str(path))}", markup=False, soft_wrap=True
            )
    out.chatter.print(
        f"kvtool launch: {plan.recipe} for vLLM {plan.vllm_version}, target {target}",
        markup=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    """Add ``kvtool launch`` to the root app."""
    app.command("launch", no_args_is_help=True)(launch)
