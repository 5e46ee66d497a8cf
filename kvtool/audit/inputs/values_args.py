"""Values files of charts kvtool has no map for: an argument list next to a vLLM image.

Many charts take the server's arguments as a list in their values, beside the image
the chart runs (``image: {repository: vllm/vllm-openai, tag: v0.9.2}`` with
``extraArgs``, ``extraCmdArgs``, ``serverArgs`` or ``args``), and pass it after the
image's entrypoint; e.g. vLLM's own chart (examples/online_serving/chart-helm
values.yaml, ``extraArgs``) and KServe predictor values (``args:`` under
``predictor.model``). Such a list is read as serve arguments when its key names
arguments, most of its ``--`` words are flags of some vLLM release, and the image
beside it (or above it) is one whose entrypoint starts vLLM or whose name says vLLM.
Nothing else of the chart is known (its templates decide), so a note says so.

Benchmark harnesses and wrappers write the server's settings as a mapping instead,
under a key that names vLLM or its engine (``vllm: {gpu_memory_utilization: 0.4,
max_model_len: 2048}``, https://github.com/inference-sim/pytools data/README.md's
runner config; ``engine_args:``); such a mapping whose keys are mostly vLLM flags is
read as the flags they set, as a ``--config`` file's keys are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.container import container_invocations
from kvtool.audit.inputs.detect import known_flag_spellings
from kvtool.audit.inputs.shell import ShellContext
from kvtool.audit.model import Invocation
from kvtool.releases.images import serve_entrypoint

_ARGS_KEY = re.compile(r"(?i)(?:^|[a-z_-])(?:args|arguments)$")
_SETTINGS_KEY = re.compile(r"(?i)vllm|^(?:engine|server|serve)[_-]?(?:args|config|kwargs)$")
# A settings mapping needs this many flag keys to be read as vLLM's.
MIN_FLAG_KEYS = 2
# A list is vLLM's arguments when at least this share of its flags are vLLM flags.
FLAG_SHARE = 0.6
NOTE = (
    "an argument list of a chart's values beside a vLLM image: read as the arguments "
    "of the image's entrypoint; the chart's templates may add others"
)


def args_lists(documents: list[yaml.Node], text: str, context: ShellContext) -> list[Invocation]:
    found: list[Invocation] = []
    for document in documents:
        for key, node, image in _argument_lists(document, None):
            words = [
                ArgvWord(
                    yaml_tree.scalar(item) or "",
                    yaml_tree.location(item, context.file),
                    yaml_tree.scalar_source_span(item, text),
                )
                for item in node.value
            ]
            where = yaml_tree.location(node, context.file)
            labelled = ShellContext(
                file=context.file,
                kind=context.kind,
                base_dir=context.base_dir,
                image=image,
                label=f"{context.file or '<input>'}: values {key} (line {where.line})",
            )
            for invocation in container_invocations(words, text, labelled, image_entrypoint=()):
                invocation.notes = (*invocation.notes, NOTE)
                found.append(invocation)
    return found


SETTINGS_NOTE = (
    "a mapping of vLLM flags under {key}: read as the flags it sets; the program that "
    "reads it may add or change others"
)


def flag_mappings(documents: list[yaml.Node], context: ShellContext) -> list[Invocation]:
    """Mappings of vLLM flags under a key naming vLLM or its engine, as invocations."""
    from kvtool.audit.model import Invocation

    found: list[Invocation] = []
    for document in documents:
        for key, node in _settings(document, frozenset()):
            where = yaml_tree.location(node, context.file)
            items = tuple(
                (
                    name,
                    yaml_tree.construct(value, context.file),
                    yaml_tree.location(k, context.file),
                )
                for name, k, value in yaml_tree.items(node)
                if _is_flag(name)
            )
            found.append(
                Invocation(
                    kind=context.kind,
                    label=f"{context.file or '<input>'}: {key} (line {where.line})",
                    file=context.file,
                    config_items=items,
                    suppressions=context.suppressions,
                    notes=(SETTINGS_NOTE.format(key=key),),
                )
            )
    return found


def _settings(node: yaml.Node, seen: frozenset[int]) -> Iterator[tuple[str, yaml.MappingNode]]:
    if id(node) in seen:
        return
    seen = seen | {id(node)}
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    for key, _, value in yaml_tree.items(node):
        if isinstance(value, yaml.MappingNode) and _SETTINGS_KEY.search(key):
            names = [name for name, _, _ in yaml_tree.items(value)]
            flags = [name for name in names if _is_flag(name)]
            if len(flags) >= MIN_FLAG_KEYS and len(flags) >= FLAG_SHARE * len(names):
                yield key, value
                continue
        children.append(value)
    for child in children:
        yield from _settings(child, seen)


def _is_flag(key: str) -> bool:
    return "--" + key.replace("_", "-") in known_flag_spellings()


def _argument_lists(
    node: yaml.Node, image: str | None, seen: frozenset[int] = frozenset()
) -> Iterator[tuple[str, yaml.SequenceNode, str | None]]:
    if id(node) in seen:
        return
    seen = seen | {id(node)}
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _argument_lists(item, image, seen)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    here = image_reference(yaml_tree.get(node, "image")) or image
    has_command = yaml_tree.get(node, "command") is not None
    for key, _, value in yaml_tree.items(node):
        if (
            isinstance(value, yaml.SequenceNode)
            and _ARGS_KEY.search(key)
            and not has_command
            and is_vllm_image(here)
            and mostly_vllm_flags(_scalar_list(value))
        ):
            yield key, value, here
        elif isinstance(value, (yaml.MappingNode, yaml.SequenceNode)):
            yield from _argument_lists(value, here, seen)


def image_reference(node: yaml.Node | None) -> str | None:
    """``image: repo:tag`` or ``image: {repository, tag}`` as one reference."""
    written = yaml_tree.scalar(node)
    if written is not None:
        return written
    repository = yaml_tree.scalar(yaml_tree.get(node, "repository"))
    if repository is None:
        return None
    registry = yaml_tree.scalar(yaml_tree.get(node, "registry"))
    tag = yaml_tree.scalar(yaml_tree.get(node, "tag"))
    reference = f"{registry}/{repository}" if registry else repository
    return f"{reference}:{tag}" if tag else reference


def is_vllm_image(image: str | None) -> bool:
    if image is None:
        return False
    return "vllm" in image.lower() or serve_entrypoint(image) is not None


def _scalar_list(node: yaml.SequenceNode) -> list[str] | None:
    texts = [yaml_tree.scalar(item) for item in node.value]
    return None if any(t is None for t in texts) else [t or "" for t in texts]


def mostly_vllm_flags(texts: list[str] | None) -> bool:
    """Whether argument words are vLLM's: most of their ``--`` words are flags of some
    vLLM release."""
    if not texts:
        return False
    flags = [t.split("=", 1)[0] for t in texts if t.startswith("--")]
    known = known_flag_spellings()
    hits = sum(1 for flag in flags if flag.replace("_", "-") in known)
    return bool(flags) and hits >= FLAG_SHARE * len(flags)
