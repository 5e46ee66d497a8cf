"""The generic server finder: a vLLM server start in any text, whatever form holds it.

Under every reader: a file no reader takes, or one whose reader found nothing, is
searched here, so a form kvtool has no reader for is "found, partly understood",
never "not there". Two ways of writing a command are recognised at the token level:

* a **list of argv words** (Python, JSON, TOML, HCL, YAML flow lists):
  ``["vllm", "serve", ...]``, ``["python3", "-m", "vllm.entrypoints.openai.api_server",
  ...]``, read with :mod:`.literals` (names and calls are runtime values);
* a **shell-like line**: ``vllm serve ...``, ``python -m vllm.entrypoints...``,
  ``docker run IMAGE ...`` with its backslash-continued lines, or the quoted string
  holding it (``"command": "vllm serve ..."``, ``ExecStart=vllm serve ...``), read
  with the shell reader; where it does not lex as shell its words are split on blanks.

YAML files are walked as a tree instead (:func:`find_in_yaml`): any string scalar that
starts a server (a block scalar under any key: ``customCommand: |``, ``server_cmd: >``)
and any list of words is read, with positions exact; an ``env:``/``envs:`` mapping and
an ``image:`` beside or above a command are its environment and image. What the
finder cannot know (the pod or program around a command) is said in a note.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import msgspec
import yaml

from kvtool.audit.inputs import detect, literals, values_args, yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord, find_serve
from kvtool.audit.inputs.container import container_invocations
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.registry import GENERIC
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import EnvAssignment, Invocation, Location
from kvtool.errors import KvtoolError

KIND = GENERIC
NOTE = (
    "found by the generic server finder (no reader of this file's form): its argv words, "
    "their positions and an env: and image: written beside them are read; the pod or "
    "program around it is not"
)
_LINE_START = detect.SERVER_LINE
_LIST_START = detect.SERVER_LIST
may_find = detect.may_find_server


def find(text: str, source: ReadSource) -> list[Invocation]:
    """Every server start in ``text``: a YAML tree when it parses as one with a mapping
    or list at its top (JSON too), else the raw text."""
    if "vllm" not in text:
        return []
    documents = _yaml_documents(text, source)
    if documents:
        return _noted(find_in_yaml(documents, text, source, KIND))
    if not may_find(text):
        return []
    return _noted(find_in_text(text, source, KIND))


# A top-level `key:` line: the text may be YAML whatever its name (user data, a
# Procfile, a Taskfile without suffix).
_TOP_LEVEL_KEY = re.compile(r"^[A-Za-z_][\w.-]*:(?:[ \t]|$)", re.MULTILINE)


def _yaml_documents(text: str, source: ReadSource) -> list[yaml.Node]:
    """The YAML documents of ``text`` when it is YAML or JSON with a mapping or list at
    its top; [] otherwise (then it is read as raw text)."""
    name = (source.file or "").lower()
    named = name.endswith((".yaml", ".yml", ".json")) or text.lstrip().startswith(("{", "["))
    if not named and not _TOP_LEVEL_KEY.search(text):
        return []
    try:
        documents = yaml_tree.compose_documents(text, source.file)
    except (KvtoolError, RecursionError):
        documents = _json_with_comments(text, source)
    structured = (yaml.MappingNode, yaml.SequenceNode)
    return documents if any(isinstance(d, structured) for d in documents) else []


def _json_with_comments(text: str, source: ReadSource) -> list[yaml.Node]:
    """JSON with comments (JSONC: VS Code's launch.json and tasks.json, devcontainer.json)
    read as JSON, the comments blanked in place so every offset stays where it was
    written (trailing commas are valid YAML flow already); [] when it still is not."""
    if not text.lstrip().startswith(("{", "[")) or "/" not in text:
        return []
    try:
        return yaml_tree.compose_documents(_blank_comments(text), source.file)
    except (KvtoolError, RecursionError):
        return []


_JSON_COMMENT_OR_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.DOTALL)


def _blank_comments(text: str) -> str:
    def blank(match: re.Match[str]) -> str:
        written = match.group(0)
        if written.startswith('"'):
            return written
        return re.sub(r"[^\n]", " ", written)

    return _JSON_COMMENT_OR_STRING.sub(blank, text)


def _noted(found: list[Invocation]) -> list[Invocation]:
    for invocation in found:
        if invocation.kind == KIND:
            invocation.notes = (*invocation.notes, NOTE)
    return found


def find_in_text(text: str, source: ReadSource, kind: str) -> list[Invocation]:
    """Server starts in raw text: list literals first, then shell-like lines."""
    index = LineIndex(text, source.file)
    context = ShellContext(file=source.file, kind=kind, base_dir=source.base_dir)
    found: list[tuple[int, list[Invocation]]] = []
    taken: list[tuple[int, int]] = []
    for match in _LIST_START.finditer(text):
        if _inside(match.start(), taken):
            continue
        opening = literals.enclosing_list(text, match.start())
        if opening is None:
            continue
        words, end = literals.list_words(text, opening, index)
        taken.append((opening, end))
        found.append((opening, container_invocations(words, text, context, image_entrypoint=None)))
    for match in _LINE_START.finditer(text):
        if _inside(match.start(), taken) or _commented(text, match.start()):
            continue
        start, end, script, mapping = _line_region(text, match.start())
        taken.append((start, end))
        found.append((start, _read_line(script, mapping, index, context)))
    invocations = [i for _, group in sorted(found, key=lambda f: f[0]) for i in group]
    return invocations or _args_beside_image(text, index, context)


# `image = "vllm/vllm-openai:v0.9.1"` / `"image": "..."` and `args = [` / `"args": [`
# in HCL (Terraform's kubernetes provider, Nomad), TOML or JSON-like text.
_IMAGE_SETTING = re.compile(r"""\bimage["']?\s*[=:]\s*["']([^"'\s]+)["']""")
_ARGS_SETTING = re.compile(r"""\b(\w*[aA]rgs)["']?\s*[=:]\s*\[""")


def _args_beside_image(text: str, index: LineIndex, context: ShellContext) -> list[Invocation]:
    """An argument list written beside a vLLM image in text no reader takes: the
    arguments of the image's entrypoint (see :mod:`.values_args` for YAML)."""
    from kvtool.audit.inputs.values_args import is_vllm_image, mostly_vllm_flags

    images = [m for m in _IMAGE_SETTING.finditer(text) if is_vllm_image(m.group(1))]
    if not images:
        return []
    found: list[Invocation] = []
    for match in _ARGS_SETTING.finditer(text):
        words, _ = literals.list_words(text, match.end() - 1, index)
        if not mostly_vllm_flags([w.text for w in words]):
            continue
        image = min(images, key=lambda m: abs(m.start() - match.start())).group(1)
        beside = msgspec.structs.replace(context, image=image)
        found.extend(container_invocations(words, text, beside, image_entrypoint=()))
    return found


# What starts a comment line in the languages a command is found in: a command that
# is commented out starts nothing.
_COMMENT_STARTS = ("#", "//", "/*", "*", ";", "<!--", "-- ", "rem ", "REM ")


def _commented(text: str, offset: int) -> bool:
    line_start = text.rfind("\n", 0, offset) + 1
    return text[line_start:offset].lstrip().startswith(_COMMENT_STARTS)


def _inside(offset: int, taken: list[tuple[int, int]]) -> bool:
    return any(start <= offset < end for start, end in taken)


def _line_region(text: str, offset: int) -> tuple[int, int, str, OffsetMap]:
    """The command around ``offset``: the quoted string holding it, else its line with
    the lines a trailing backslash continues it onto."""
    line_start = text.rfind("\n", 0, offset) + 1
    quote = _opening_quote(text, line_start, offset)
    if quote is not None:
        literal = literals.string_at(text, quote)
        if literal is not None:
            mapping = OffsetMap.align(literal.value, text, quote + 1, literal.end - 1)
            return quote, literal.end, literal.value, mapping
    end = text.find("\n", offset)
    while end >= 0 and text[:end].rstrip(" \t\r").endswith("\\"):
        end = text.find("\n", end + 1)
    end = len(text) if end < 0 else end
    start = _after_setting(text, line_start, offset)
    return start, end, text[start:end], OffsetMap.identity(start)


def _after_setting(text: str, line_start: int, offset: int) -> int:
    """Where the command starts when a setting's name is glued to it (``command=vllm
    serve`` in a supervisord or INI file, ``ExecStart=/usr/bin/vllm``): after the ``=``
    of the word holding the command's first word; else the line's start."""
    word_start = offset
    while word_start > line_start and not text[word_start - 1].isspace():
        word_start -= 1
    equals = text.rfind("=", word_start, offset)
    return equals + 1 if equals >= 0 else line_start


def _opening_quote(text: str, line_start: int, offset: int) -> int | None:
    """The offset of the quote that is open at ``offset`` on its line, if any."""
    open_at: int | None = None
    position = line_start
    while position < offset:
        char = text[position]
        if open_at is None and char in "\"'":
            open_at = position
        elif open_at is not None and char == text[open_at]:
            open_at = None
        elif char == "\\":
            position += 1
        position += 1
    return open_at


def _read_line(
    script: str, mapping: OffsetMap, index: LineIndex, context: ShellContext
) -> list[Invocation]:
    def locate(start: int, end: int) -> Location:
        return index.location(mapping.to_source(start), mapping.to_source(end))

    return _read_script(script, locate, context)


# Words that may stand before a server start in a command: wrappers that run it, and
# the keywords around commands in scripts and task files. Any other word there (a
# message's "start", "use", "with") makes the text prose that mentions a command.
_LAUNCHERS = frozenset(
    {
        "exec", "nohup", "env", "sudo", "time", "nice", "ionice", "timeout", "setsid",
        "stdbuf", "numactl", "taskset", "uv", "uvx", "run", "poetry", "pipenv", "pdm",
        "hatch", "conda", "mamba", "micromamba", "pixi", "srun", "mpirun", "apptainer",
        "singularity", "then", "do", "else", "cmd", "sh", "bash", "-c", "&", "!",
    }
)  # fmt: skip
_COMMAND_BREAK = re.compile(r"[\n;|&(`]")


def _starts_like_a_command(script: str) -> bool:
    """Whether a server start in ``script`` is written as a command: only wrappers,
    assignments, options, paths and setting names come before it in its command."""
    for match in _LINE_START.finditer(script):
        breaks = [m.end() for m in _COMMAND_BREAK.finditer(script, 0, match.start())]
        before = script[breaks[-1] if breaks else 0 : match.start()].split()
        if all(_launcher_word(word) for word in before):
            return True
    return False


def _launcher_word(word: str) -> bool:
    return (
        word.lower() in _LAUNCHERS
        or word.startswith(("-", "$", '"', "'"))
        or "=" in word
        or "/" in word
        or word.endswith(":")
    )


def _read_script(
    script: str, locate: Callable[[int, int], Location], context: ShellContext
) -> list[Invocation]:
    """A command found by the finder, read as shell (a template's ``{{ field }}``, and a
    word that is one ``{field}``, as a runtime value); split on blanks where it does not
    lex as shell. Text that only mentions a start (a message, a description) is none."""
    if not _starts_like_a_command(script):
        return []
    if "{" in script:
        script, fields = literals.template_fields_as_runtime(script)
        written = locate

        def locate(start: int, end: int) -> Location:
            return written(fields.to_source(start), fields.to_source(end))

    try:
        return read_script(script, locate, context)
    except KvtoolError:
        words = [
            ArgvWord(m.group(0), locate(m.start(), m.end()), None)
            for m in re.finditer(r"\S+", script)
        ]
        return container_invocations(words, script, context, image_entrypoint=None)


def find_in_yaml(
    documents: list[yaml.Node], text: str, source: ReadSource, kind: str
) -> list[Invocation]:
    """Server starts anywhere in YAML documents: string scalars as scripts, lists of
    scalars as argv words."""
    index = LineIndex(text, source.file)
    context = ShellContext(file=source.file, kind=kind, base_dir=source.base_dir)
    found: list[Invocation] = []
    for document in documents:
        for node, env, image in _nodes(document, source.file):
            beside = msgspec.structs.replace(context, env=env, image=image)
            found.extend(_node_invocations(node, text, index, beside))
    if not found:
        found = values_args.args_lists(documents, text, context) or values_args.flag_mappings(
            documents, context
        )
    return found


# Keys whose mapping (NAME: value) or list (NAME=value) is the environment of the
# commands written beside them or below them: a harness's `env_common:` and `envs:`
# around its `server_cmd:` (vllm-project/vllm-ascend tests/e2e/nightly/multi_node
# configs), `env:`, `environment:`, GitLab's `variables:`.
_ENV_KEY = re.compile(r"(?i)^(?:env|envs|environment)(?:[_-]\w+)?$|^env_vars$|^variables$")
_Env = tuple[EnvAssignment, ...]


def _nodes(node: yaml.Node, file: str | None) -> Iterator[tuple[yaml.Node, _Env, str | None]]:
    """Every node once, depth first, with the environment and the image written beside
    it or above it (a CI job's `image:`, a values file's); a list of argv words is not
    entered."""
    stack: list[tuple[yaml.Node, _Env, str | None]] = [(node, (), None)]
    seen: set[int] = set()
    while stack:
        current, env, image = stack.pop()
        if id(current) in seen:
            continue  # an alias
        seen.add(id(current))
        if isinstance(current, yaml.MappingNode):
            env = env + _environment(current, file)
            image = values_args.image_reference(yaml_tree.get(current, "image")) or image
            stack.extend((value, env, image) for _, value in reversed(current.value))
        elif isinstance(current, yaml.SequenceNode) and not _starts_server(current):
            stack.extend((item, env, image) for item in reversed(current.value))
        yield current, env, image


def _environment(mapping: yaml.MappingNode, file: str | None) -> _Env:
    found: list[EnvAssignment] = []
    for key, _, value in yaml_tree.items(mapping):
        if not _ENV_KEY.match(key):
            continue
        for name, name_node, value_node in yaml_tree.items(value):
            written = yaml_tree.scalar(value_node)
            where = yaml_tree.location(name_node, file)
            found.append(EnvAssignment(name=name, value=written, location=where))
        for item in yaml_tree.sequence(value):
            name, has_value, written = (yaml_tree.scalar(item) or "").partition("=")
            if name:
                where = yaml_tree.location(item, file)
                known = written if has_value else None
                found.append(EnvAssignment(name=name, value=known, location=where))
    return tuple(found)


def _starts_server(node: yaml.SequenceNode) -> bool:
    texts = [yaml_tree.scalar(item) for item in node.value]
    return all(t is not None for t in texts) and find_serve([t or "" for t in texts]) is not None


# A program and its arguments written under sibling keys: VS Code's launch.json
# (`"module": "vllm.entrypoints.openai.api_server", "args": [...]`,
# https://code.visualstudio.com/docs/python/debugging#_module), task runners'
# `command:` + `args:`.
_PROGRAM_KEYS = ("module", "command", "cmd", "program", "entrypoint", "executable")
_ARGUMENT_KEYS = ("args", "arguments", "argv")


def _program_and_arguments(
    node: yaml.MappingNode, text: str, index: LineIndex, context: ShellContext
) -> list[Invocation]:
    program = next(
        ((key, value) for key in _PROGRAM_KEYS if (value := yaml_tree.get(node, key)) is not None),
        None,
    )
    arguments = next(
        (value for key in _ARGUMENT_KEYS if (value := yaml_tree.get(node, key)) is not None),
        None,
    )
    if program is None or not isinstance(arguments, yaml.SequenceNode):
        return []
    key, value = program
    written = yaml_tree.scalar(value)
    if written is None or "vllm" not in written:
        return []
    where = yaml_tree.location(value, index.file)
    span = yaml_tree.scalar_source_span(value, text)
    head = ["python", "-m", written] if key == "module" else written.split()
    words = [ArgvWord(word, where, span if len(head) == 1 else None) for word in head]
    words += [_scalar_word(item, text, index) for item in arguments.value]
    if find_serve([w.text for w in words]) is None:
        return []
    return container_invocations(words, text, context, image_entrypoint=None)


def _scalar_word(item: yaml.Node, text: str, index: LineIndex) -> ArgvWord:
    return ArgvWord(
        yaml_tree.scalar(item) or "",
        yaml_tree.location(item, index.file),
        yaml_tree.scalar_source_span(item, text),
    )


def _node_invocations(
    node: yaml.Node, text: str, index: LineIndex, context: ShellContext
) -> list[Invocation]:
    if isinstance(node, yaml.MappingNode):
        return _program_and_arguments(node, text, index, context)
    if isinstance(node, yaml.SequenceNode) and _starts_server(node):
        words = [_scalar_word(item, text, index) for item in node.value]
        return container_invocations(words, text, context, image_entrypoint=None)
    if not isinstance(node, yaml.ScalarNode) or not isinstance(node.value, str):
        return []
    if not _LINE_START.search(node.value):
        return []
    run = yaml_tree.scalar_script(node, text, index)
    if run is None:
        return []
    script, locate = run
    return _read_script(script, locate, context)
