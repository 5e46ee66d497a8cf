"""Audit settings: ``[tool.kvtool]`` in pyproject.toml, or ``kvtool.toml`` / ``.kvtool.toml``.

Discovery follows ruff: starting at a directory and walking up, the first directory
holding ``.kvtool.toml``, ``kvtool.toml`` or a ``pyproject.toml`` with a
``[tool.kvtool]`` table wins (in that order inside one directory). Keys may sit at
the top of the table or under its ``audit`` sub-table. Command-line options beat the
file: ``--select`` replaces ``select``, ``--ignore`` adds to ``ignore``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path, PurePath
from typing import Annotated, Any

import msgspec

from kvtool.audit.model import Severity
from kvtool.errors import KvtoolError
from kvtool.fsio import read_input_text
from kvtool.limits import MOST_GIB
from kvtool.nesting import loads_toml
from kvtool.records import problem_of

SETTINGS_FILES = (".kvtool.toml", "kvtool.toml", "pyproject.toml")
_AUDIT_TABLE = "audit"


class AuditSettings(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="kebab"
):
    """The resolved settings; every field has the default used when no file sets it.

    Files spell the keys in kebab case (``fail-on``), as ruff does.
    """

    vllm_version: str | None = None  # a string such as "0.32.0", never a TOML float
    # The LMCache release installed next to vLLM. The serve config cannot say; without
    # this, the audit reads it from the input where it can (kvtool.audit.lmcache_release).
    lmcache_version: str | None = None
    # The releases of the stack's other components (nixl = "0.7.1", dynamo = "0.6.1"),
    # over what the input shows (kvtool.audit.component_release).
    component_versions: dict[str, str] = msgspec.field(default_factory=dict)
    select: tuple[str, ...] = ("ALL",)
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    fail_on: Severity = Severity.error
    severity: dict[str, Severity] = msgspec.field(default_factory=dict)
    host_ram_gib: Annotated[float, msgspec.Meta(gt=0, le=MOST_GIB)] | None = None
    # A config.json (or model directory) for the served model, when the audit cannot read
    # it from the served model's own path; model-dependent rules read their facts from it.
    model_config: str | None = None
    exclude: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()
    baseline: str | None = None
    source: str | None = None  # the settings file, when one was found

    @property
    def root(self) -> Path:
        """The directory relative paths in the settings are read from."""
        return Path(self.source).resolve().parent if self.source else Path.cwd()

    def excluded(self) -> Callable[[str], bool] | None:
        """Whether a file a walk found is excluded; None when nothing is."""
        patterns = (*self.exclude, *self.extend_exclude)
        if not patterns:
            return None
        import pathspec

        spec = pathspec.GitIgnoreSpec.from_lines(patterns)
        root = self.root

        def matches(file: str) -> bool:
            resolved = Path(file).resolve()
            if resolved.is_relative_to(root):
                return spec.match_file(resolved.relative_to(root).as_posix())
            return spec.match_file(PurePath(file).as_posix())

        return matches

    def ignored_for(self, file: str | None) -> tuple[str, ...]:
        """Selectors ignored for ``file``: ``ignore`` plus every ``per-file-ignores`` glob
        matching the file as given, its name, or (as ruff does) its path relative to the
        settings file's directory."""
        extra: list[str] = []
        if file is not None and self.per_file_ignores:
            spellings = {PurePath(file).as_posix(), PurePath(file).name}
            if self.source is not None:
                root = Path(self.source).resolve().parent
                resolved = Path(file).resolve()
                if resolved.is_relative_to(root):
                    spellings.add(resolved.relative_to(root).as_posix())
            for pattern, codes in self.per_file_ignores.items():
                if any(fnmatch(spelling, pattern) for spelling in spellings):
                    extra.extend(codes)
        return (*self.ignore, *extra)

    def as_file_keys(self) -> dict[str, Any]:
        """The settings as ``--show-settings`` prints them (file spelling of the keys)."""
        keys: dict[str, Any] = msgspec.to_builtins(self)
        return keys


def _table_of(path: Path) -> dict[str, Any] | None:
    """The kvtool table in ``path`` (None for a pyproject.toml without ``[tool.kvtool]``)."""
    text = read_input_text(path)  # a regular UTF-8 file within the input size limit
    if path.name == "pyproject.toml" and not _may_name_kvtool(text):
        return None  # another project's file: parsing it cost a cold start ~10% (issue 26)
    try:
        data = loads_toml(text, str(path))
    except tomllib.TOMLDecodeError as exc:
        raise KvtoolError(f"{path}: not valid TOML: {exc}") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise KvtoolError(f"{path}: not usable TOML: {exc}") from None
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        table = tool.get("kvtool") if isinstance(tool, dict) else None
        return table if isinstance(table, dict) else None
    return data


def _may_name_kvtool(text: str) -> bool:
    """Whether pyproject.toml ``text`` can hold a ``tool.kvtool`` table: a header or a
    key whose path, under the header it sits in, starts ``tool.kvtool`` (``[tool.kvtool]``,
    ``[tool]`` then ``kvtool.select = ...``, ``tool.kvtool.select = ...``), or an inline
    ``tool = {...}``. Text this line scan cannot follow (a multi-line string, a key with
    ``\\u`` escapes) is parsed. A file without one is passed over unparsed: a project's
    own metadata (``name = "kvtool"``, ``[project.scripts] kvtool = ...``) cost a cold
    start a TOML parse (issue 26), and a broken pyproject.toml of a project that does not
    configure kvtool is not kvtool's error."""
    if "kvtool" not in text and "\\u" not in text and "\\U" not in text:
        return False
    if any(mark in text for mark in ('"""', "'''", "\\u", "\\U")):
        return True
    header = ""
    for line in text.splitlines():
        if (found := _HEADER.match(line)) is not None:
            header = _key_path(found.group(1))
            if _names_kvtool(header):
                return True
        elif (found := _KEY.match(line)) is not None:
            key = _key_path(found.group(1))
            path = f"{header}.{key}" if header else key
            if _names_kvtool(path) or (path == "tool" and found.group(2) == "{"):
                return True
    return False


_HEADER = re.compile(r"[ \t]*\[\[?([^\]#]*)\]")
_KEY = re.compile(r"[ \t]*([^=#\[]+?)[ \t]*=[ \t]*(\{)?")


def _key_path(key: str) -> str:
    """A dotted key as ``a.b.c``, without its quotes and the blanks around its dots."""
    return ".".join(part.strip().strip("\"'") for part in key.split("."))


def _names_kvtool(path: str) -> bool:
    return path == "tool.kvtool" or path.startswith("tool.kvtool.")


def find_settings_file(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The closest settings file at or above ``start`` and its kvtool table."""
    directory = start.resolve()
    for candidate_dir in (directory, *directory.parents):
        for name in SETTINGS_FILES:
            path = candidate_dir / name
            if path.is_file():
                table = _table_of(path)
                if table is not None:
                    return path, table
    return None


def settings_from_table(table: dict[str, Any], source: str) -> AuditSettings:
    """Validate one kvtool table (keys at the top or under ``audit``); errors name file and key."""
    merged = {k: v for k, v in table.items() if k != _AUDIT_TABLE}
    audit = table.get(_AUDIT_TABLE, {})
    if not isinstance(audit, dict):
        raise KvtoolError(f"{source}: `{_AUDIT_TABLE}` must be a table")
    merged.update(audit)
    try:
        return msgspec.convert({**merged, "source": source}, type=AuditSettings)
    except msgspec.ValidationError as exc:
        key, message = problem_of(exc)
        raise KvtoolError(f"{source}: setting `{key or '(table)'}`: {message}") from None


def load_settings(start: Path) -> AuditSettings:
    """Settings discovered from ``start`` upwards; defaults when no file is found."""
    found = find_settings_file(start)
    if found is None:
        return AuditSettings()
    path, table = found
    return settings_from_table(table, str(path))


def _split_commas(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def apply_cli(
    settings: AuditSettings,
    *,
    vllm_version: str | None = None,
    lmcache_version: str | None = None,
    component_versions: dict[str, str] | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    fail_on: Severity | None = None,
    host_ram_gib: float | None = None,
    model_config: str | None = None,
    exclude: list[str] | None = None,
    extend_exclude: list[str] | None = None,
) -> AuditSettings:
    """Command-line values over file values (``--ignore`` adds; the rest replace).

    ``--select``/``--ignore`` values may also be comma-separated (``--select VG,CN010``).
    """
    select = _split_commas(select)
    ignore = _split_commas(ignore)
    if select or ignore:
        # Checked here, so a bad one is blamed on the command line, not the settings file.
        from kvtool.audit.engine import resolve_selectors
        from kvtool.audit.registry import registry

        resolve_selectors(select or (), "--select", registry)
        resolve_selectors(ignore or (), "--ignore", registry)
    update: dict[str, Any] = {}
    if vllm_version is not None:
        update["vllm_version"] = vllm_version
    if lmcache_version is not None:
        update["lmcache_version"] = lmcache_version
    if component_versions:
        update["component_versions"] = {**settings.component_versions, **component_versions}
    if select:
        update["select"] = tuple(select)
        update["extend_select"] = ()
    if ignore:
        update["ignore"] = (*settings.ignore, *ignore)
    if fail_on is not None:
        update["fail_on"] = fail_on
    if host_ram_gib is not None:
        # structs.replace does not validate: nan passes click's range and inf its minimum.
        if not 0 < host_ram_gib <= MOST_GIB:
            raise KvtoolError(
                f"--host-ram-gib {host_ram_gib}: expected a finite number of GiB, "
                f"above 0 and at most {MOST_GIB:.0f}"
            )
        update["host_ram_gib"] = host_ram_gib
    if model_config is not None:
        update["model_config"] = model_config
    exclude = _split_commas(exclude)
    extend_exclude = _split_commas(extend_exclude)
    if exclude:
        update["exclude"] = tuple(exclude)
    if extend_exclude:
        update["extend_exclude"] = (*settings.extend_exclude, *extend_exclude)
    return msgspec.structs.replace(settings, **update)
