"""vLLM ``--config`` YAML: top-level keys are flag names without dashes.

vLLM turns each item into argv words (nested mappings become one JSON argument)
and inserts them right after the model, so flags on the command line win; the
normaliser replays that, so this reader only keeps each key, its value and where
it was written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import Invocation, Location, SourceToken
from kvtool.errors import KvtoolError

ConfigItems = tuple[tuple[str, Any, Location | None], ...]

# A YAML mapping is read as a vLLM --config file when at least this share of its
# top-level keys are vLLM flags: real config files are all flags, and one or two
# misspelt or removed ones must still be reported; Helm values and CI files have few.
CONFIG_FLAG_SHARE = 0.5
_TOP_LEVEL_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*):(?:\s|$)", re.MULTILINE)


def is_config(text: str) -> bool:
    """Whether a YAML text reads as a --config file (the registry's detection asks)."""
    from kvtool.audit.inputs.detect import known_flag_spellings

    keys = _TOP_LEVEL_KEY.findall(text)
    flags = known_flag_spellings()
    hits = sum(1 for key in keys if "--" + key.replace("_", "-") in flags)
    return hits > 0 and hits >= CONFIG_FLAG_SHARE * len(keys)


@dataclass(frozen=True)
class WrittenFile:
    """A file a script writes with a here-document: its text and where the text starts."""

    text: str
    file: str | None  # the script
    first_line: int  # line of the script holding the text's first line


def _shifted(items: ConfigItems, heredoc: WrittenFile) -> ConfigItems:
    """Items of a here-document, with lines counted in the script that holds it."""
    out: list[tuple[str, Any, Location | None]] = []
    for key, value, loc in items:
        if loc is not None and loc.line is not None:
            loc = msgspec.structs.replace(
                loc,
                line=loc.line + heredoc.first_line - 1,
                end_line=loc.end_line + heredoc.first_line - 1 if loc.end_line else None,
            )
        out.append((key, value, loc))
    return tuple(out)


def config_items(text: str, file: str | None) -> ConfigItems:
    """The items of one config file; anything but a single mapping is an error."""
    # PyYAML is imported only when a YAML file is read: shell and argv inputs never pay for it.
    import yaml

    from kvtool.audit.inputs import yaml_tree

    documents = yaml_tree.compose_documents(text, file)
    if not documents:
        return ()
    if len(documents) > 1:
        raise KvtoolError(
            f"{yaml_tree.where(documents[1], file)}: a vLLM --config file holds one YAML document"
        )
    root = documents[0]
    if not isinstance(root, yaml.MappingNode):
        raise KvtoolError(
            f"{yaml_tree.where(root, file)}: a vLLM --config file must be a mapping of flag names"
        )
    found: list[tuple[str, Any, Location | None]] = []
    for key, key_node, value_node in yaml_tree.items(root):
        found.append(
            (key, yaml_tree.construct(value_node, file), yaml_tree.location(key_node, file))
        )
    return tuple(found)


def read(text: str, source: ReadSource) -> list[Invocation]:
    return read_config_file(text, source.file)


def read_config_file(text: str, file: str | None) -> list[Invocation]:
    """A config file given directly: one invocation made only of config items.

    A key written twice is said in a note; both reach the normaliser in order, so the
    last one wins, as vLLM's YAML loading and argparse keep the last.
    """
    from kvtool.audit.inputs import yaml_tree

    documents = yaml_tree.compose_documents(text, file)
    notes = tuple(yaml_tree.duplicate_keys(documents[0], file)) if documents else ()
    return [
        Invocation(
            kind="vllm-config",
            label=file or "<config>",
            file=file,
            config_items=config_items(text, file),
            notes=notes,
        )
    ]


def referenced_config(
    tokens: tuple[SourceToken, ...],
    base_dir: Path | None,
    written: Mapping[str, WrittenFile] | None = None,
) -> tuple[ConfigItems, tuple[str, ...]]:
    """Items of the file named by ``--config FILE`` in ``tokens``, and notes on what was skipped.

    ``written``: files the same script wrote with a here-document (``cat > c.yaml <<EOF``),
    by the path it wrote; such a file is read from the script, at the script's lines.

    Only the two-word form is expanded, exactly as vLLM's parser checks for the word
    ``--config``; ``--config=FILE`` is accepted by argparse but its file is never read.
    """
    words = [t.text for t in tokens]
    notes: list[str] = []
    if any(w.startswith("--config=") for w in words):
        notes.append(
            "--config=FILE is not expanded by vLLM's parser (only '--config FILE' is): "
            "the file's options do not apply"
        )
    if "--config" not in words:
        return (), tuple(notes)
    if words.count("--config") > 1:
        notes.append(
            "--config is given more than once: vLLM stops with 'More than one config file'"
        )
    index = words.index("--config")
    if index + 1 >= len(words):
        return (), tuple(notes)
    name = words[index + 1]
    if not name.endswith((".yaml", ".yml")):
        notes.append(f"--config {name}: vLLM reads only .yaml/.yml config files and stops here")
        return (), tuple(notes)
    heredoc = (written or {}).get(name)
    if heredoc is not None:
        return _shifted(config_items(heredoc.text, heredoc.file), heredoc), tuple(notes)
    path = Path(name)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file():
        notes.append(f"--config {name}: no such file here ({path}); its options were not read")
        return (), tuple(notes)
    from kvtool.fsio import read_input_text

    try:
        text = read_input_text(path)  # a regular file within the input size limit
    except KvtoolError as error:
        raise KvtoolError(f"cannot read --config file: {error}") from None
    return config_items(text, str(path)), tuple(notes)
