"""``kvtool launch``: emit a launch config for one offload setup (a recipe)."""

import sys
from pathlib import Path
from typing import Annotated

import typer

_TARGETS = ("shell", "compose", "k8s", "json")


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


def _print_list(as_json: bool) -> None:
    import json
    from dataclasses import asdict

    from kvtool.console import stderr
    from kvtool.launch.service import list_recipes

    summaries = list_recipes()
    if as_json:
        typer.echo(json.dumps([asdict(s) for s in summaries], indent=2))
        return
    stderr.print("kvtool launch recipes (step: the field guide's decision tree)\n")
    for s in summaries:
        step = f"step {s.decision}" if s.decision else "outside the tree"
        stderr.print(f"[bold]{s.name}[/bold]  ({step}; vLLM {s.supported}; "
                     f"targets {', '.join(s.targets)})")
        stderr.print(f"  {s.title}", markup=False)
        stderr.print(f"  Pick it when: {s.when}\n", markup=False)


def _write(files: dict[str, str], output_dir: Path | None, force: bool) -> list[Path]:
    """Print ``files``, or write each into ``output_dir`` atomically.

    A file is written only as a plain file directly inside ``output_dir``: a symlink in
    its place (which would write elsewhere) is refused, and an overwritten file keeps
    its mode; a new script is made executable.
    """
    from kvtool.errors import KvtoolError
    from kvtool.fsio import atomic_write_text, describe_os_error

    if output_dir is None:
        # Not typer.echo: click strips ANSI sequences on a pipe, which would change
        # a value (a model name) between stdout and the same file written with -o.
        for text in files.values():
            sys.stdout.write(text)
        sys.stdout.flush()
        return []
    if output_dir.exists() and not output_dir.is_dir():
        raise KvtoolError(f"-o {output_dir}: exists and is not a directory")
    paths = [_inside(output_dir, name) for name in files]
    links = [str(p) for p in paths if p.is_symlink()]
    if links:
        raise KvtoolError(f"-o {output_dir}: {', '.join(links)} is a symbolic link; not written")
    clashes = [str(p) for p in paths if p.exists()]
    if clashes and not force:
        raise KvtoolError(f"-o {output_dir}: would overwrite {', '.join(clashes)}; pass --force")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise KvtoolError(f"-o: cannot create {describe_os_error(error, output_dir)}") from None
    for path, text in zip(paths, files.values(), strict=True):
        atomic_write_text(
            path, text, mode=0o755 if path.suffix == ".sh" else None, follow_symlinks=False
        )
    return paths


def _inside(output_dir: Path, name: str) -> Path:
    """``output_dir / name``, refused unless it names a file directly inside ``output_dir``."""
    from kvtool.errors import KvtoolError

    path = output_dir / name
    if Path(name).name != name or name in ("", ".", ".."):
        raise KvtoolError(f"-o {output_dir}: {name!r} would be written outside the directory")
    return path


def launch(
    recipe: Annotated[
        str | None, typer.Argument(help="Recipe name; `kvtool launch --list` shows them.")
    ] = None,
    serve_args: Annotated[
        list[str] | None,
        typer.Argument(help="Extra `vllm serve` arguments, after `--`.", show_default=False),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="Describe every recipe and when to pick it.")
    ] = False,
    model: Annotated[str | None, typer.Option(help="Model vLLM serves (name or path).")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel size per engine.")] = 1,
    vllm_version: Annotated[
        str | None, typer.Option(help="Target vLLM release (default: the newest table).")
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
        typer.Option(help="Catalog name or config.json for sizing, when --model is not one."),
    ] = None,
    target: Annotated[str, typer.Option(help="shell | compose | k8s | json")] = "shell",
    output_dir: Annotated[
        Path | None, typer.Option("-o", "--output-dir", help="Write files here, not stdout.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite files in -o DIR.")] = False,
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
) -> None:
    """Emit a launch config for an offload setup: shell, compose, Kubernetes or JSON."""
    from pydantic import ValidationError

    from kvtool.console import stderr
    from kvtool.errors import KvtoolError
    from kvtool.launch.plan import LaunchOptions
    from kvtool.launch.service import launch as run_launch

    if target not in _TARGETS:
        raise KvtoolError(f"--target {target!r}: use one of {', '.join(_TARGETS)}")
    if list_:
        _print_list(as_json=target == "json")
        return
    if recipe is None:
        raise KvtoolError("name a recipe (kvtool launch --list shows them)")
    if model is None:
        raise KvtoolError("--model is required")
    if entrypoint not in ("cli", "module"):
        raise KvtoolError(f"--entrypoint {entrypoint!r}: use cli or module")
    from kvtool.launch.targets.names import check_host_path, check_object_name

    if name is not None:
        check_object_name(name, "--name")
    check_host_path(fs_path, "--fs-path")
    try:
        options = LaunchOptions(
            model=model,
            tp=tp,
            target=target,  # type: ignore[arg-type]  # checked against _TARGETS above
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
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "input"
        raise KvtoolError(f"{flag} {first.get('input')!r}: {first['msg']}") from None
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
        stderr.print(f"kvtool launch: {result.release_note}", markup=False)
    for warning in plan.warnings:
        stderr.print(f"kvtool launch: warning: {warning}", markup=False)
    written = _write(result.files, output_dir, force)
    for path in written:
        stderr.print(f"kvtool launch: wrote {path}", markup=False)
    stderr.print(
        f"kvtool launch: {plan.recipe} for vLLM {plan.vllm_version}, target {target}",
        markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add ``kvtool launch`` to the root app."""
    app.command("launch", no_args_is_help=True)(launch)
