"""llm-d-modelservice values: the words a container's ``modelCommand`` puts before its args.

The chart (llm-d-incubation/llm-d-modelservice charts/llm-d-modelservice/templates/
_helpers.tpl, ``vllmServeModelCommand`` and ``imageDefaultModelCommand``) renders

* ``vllmServe``: ``command: [vllm, serve]`` and args ``<model> --port P``;
* ``imageDefault``: no command (the image's entrypoint) and args ``--model <model> --port P``;

then, from the role's ``parallelism`` (``decode.parallelism``/``prefill.parallelism``),
``--tensor-parallel-size``, ``--data-parallel-size`` and ``--data-parallel-size-local``
when above 1, ``--served-model-name <modelArtifacts.name>`` and the container's ``args``.
The model is ``modelArtifacts.name`` (the chart takes it from ``modelArtifacts.uri``,
which values often write as ``hf://{{ .Values.modelArtifacts.name }}``).

Decode pods also get llm-d's routing sidecar from ``routing.proxy`` (templates/
decode-deployment.yaml includes ``llm-d-modelservice.routingProxy`` as an init container
with ``restartPolicy: Always``; _helpers.tpl renders it unless ``enabled: false``, with
``--connector={{ .proxy.connector | default "nixlv2" }}`` and image ``.proxy.image``, whose
chart default in values.yaml is ``ghcr.io/llm-d/llm-d-routing-sidecar``; read at
https://github.com/llm-d-incubation/llm-d-modelservice/blob/6ab49a0e7d4181eeb72b21c37cd12510e49f03de/charts/llm-d-modelservice/templates/_helpers.tpl).
:func:`routing_proxy` gives it as a pod container of the decode engine.
"""

from __future__ import annotations

import yaml

from kvtool.audit.inputs import pod_holder, yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.container import ConfiguredCommand
from kvtool.audit.model import PodContainer, SourceToken

VLLM_SERVE = "vllmServe"
IMAGE_DEFAULT = "imageDefault"
# What the chart renders when the values leave them out (_helpers.tpl ``default``s and the
# chart's values.yaml ``routing.proxy.image``).
PROXY_NAME = "routing-proxy"
PROXY_DEFAULT_CONNECTOR = "nixlv2"
PROXY_DEFAULT_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:latest"
PROXY_DEFAULT_SERVICE_PORT = "8000"
PROXY_DEFAULT_TARGET_PORT = "8200"
_YAML_FALSE = frozenset({"false", "no", "off"})


def configured_command(
    root: yaml.Node, container: yaml.Node, above: yaml.Node | None, file: str | None
) -> ConfiguredCommand | None:
    """The words ``modelCommand`` renders for ``container``; None for ``custom`` or none.

    ``above``: the mapping the container finder reports above the container list (the
    values root for ``decode.containers``); the role (``decode``) is the one holding it.
    """
    mode_node = yaml_tree.get(container, "modelCommand")
    mode = yaml_tree.scalar(mode_node)
    if mode not in (VLLM_SERVE, IMAGE_DEFAULT) or yaml_tree.get(container, "command") is not None:
        return None
    here = yaml_tree.location(mode_node, file) if mode_node is not None else None
    name_node = yaml_tree.get_path(root, "modelArtifacts", "name")
    model = yaml_tree.scalar(name_node)
    at = yaml_tree.location(name_node, file) if name_node is not None else here
    words: list[ArgvWord] = []
    if mode == VLLM_SERVE:
        words += [ArgvWord("vllm", here), ArgvWord("serve", here)]
    if model is not None:
        if mode == IMAGE_DEFAULT:
            words.append(ArgvWord("--model", at))
        words.append(ArgvWord(model, at))
    words += _parallelism(yaml_tree.get(_role(container, above), "parallelism"), file)
    if model is not None:
        words += [ArgvWord("--served-model-name", at), ArgvWord(model, at)]
    return ConfiguredCommand(words=words, runs_image_entrypoint=mode == IMAGE_DEFAULT)


def _role(container: yaml.Node, above: yaml.Node | None) -> yaml.Node | None:
    """The mapping (``decode``/``prefill``) whose ``containers`` list holds ``container``."""
    for candidate in (above, *(value for _, _, value in yaml_tree.items(above))):
        if pod_holder.holds(candidate, container, ("containers",)):
            return candidate
    return None


_MOST_DIGITS = 9


def _parallelism(node: yaml.Node | None, file: str | None) -> list[ArgvWord]:
    """The parallel sizes the chart derives from ``parallelism`` (its helpers' arithmetic)."""

    def size(key: str) -> tuple[int, yaml.Node] | None:
        value_node = yaml_tree.get(node, key)
        value = yaml_tree.scalar(value_node)
        # ASCII digits ("²" is a digit to isdigit, not to int), few enough that products
        # stay printable; workers: 0 is no size (the chart would divide by it).
        if value_node is None or value is None or not (value.isascii() and value.isdigit()):
            return None
        if len(value) > _MOST_DIGITS or int(value) == 0:
            return None
        return int(value), value_node

    tensor, data, local, workers = size("tensor"), size("data"), size("dataLocal"), size("workers")
    if data is None and local is not None:
        data = (local[0] * workers[0], local[1]) if workers is not None else local
    if local is None and data is not None:
        local = (data[0] // workers[0], data[1]) if workers is not None else data
    words: list[ArgvWord] = []
    for flag, found in (
        ("--tensor-parallel-size", tensor),
        ("--data-parallel-size", data),
        ("--data-parallel-size-local", local),
    ):
        if found is not None and found[0] > 1:
            at = yaml_tree.location(found[1], file)
            words += [ArgvWord(flag, at), ArgvWord(str(found[0]), at)]
    return words


def routing_proxy(
    root: yaml.Node, container: yaml.Node, above: yaml.Node | None, file: str | None
) -> tuple[PodContainer, ...]:
    """The routing sidecar the chart puts in ``container``'s pod when the values enable it.

    Only for a container of ``decode.containers`` of a values file that writes
    ``routing.proxy`` (a mapping without ``enabled: false``); its words are the ones the
    chart renders, located where the values write them (else at ``routing.proxy``).
    """
    decode = yaml_tree.get(root, "decode")
    proxy = yaml_tree.get_path(root, "routing", "proxy")
    if (
        decode is None
        or _role(container, above) is not decode
        or not isinstance(proxy, yaml.MappingNode)
        or (yaml_tree.scalar(yaml_tree.get(proxy, "enabled")) or "").lower() in _YAML_FALSE
    ):
        return ()
    proxy_at = yaml_tree.location(proxy, file)

    def value(node: yaml.Node | None, default: str) -> SourceToken | None:
        text = yaml_tree.scalar(node)
        if node is not None and not isinstance(node, yaml.ScalarNode):
            return None  # not a value the chart would print
        at = yaml_tree.location(node, file) if node is not None else proxy_at
        return SourceToken(text=text or default, location=at)  # Helm's `default`: "" too

    port = value(yaml_tree.get_path(root, "routing", "servicePort"), PROXY_DEFAULT_SERVICE_PORT)
    target = value(yaml_tree.get(proxy, "targetPort"), PROXY_DEFAULT_TARGET_PORT)
    connector = value(yaml_tree.get(proxy, "connector"), PROXY_DEFAULT_CONNECTOR)
    image = value(yaml_tree.get(proxy, "image"), PROXY_DEFAULT_IMAGE)
    argv = tuple(
        SourceToken(text=f"{flag}={token.text}", location=token.location)
        for flag, token in (("--port", port), ("--vllm-port", target), ("--connector", connector))
        if token is not None
    )
    return (
        PodContainer(
            name=PROXY_NAME,
            image=image.text if image is not None else None,
            argv=argv,
            location=proxy_at,
        ),
    )
