"""Ray: Serve LLM applications in a RayService's ``serveConfigV2``, a RayJob's entrypoint.

``import_path: ray.serve.llm:build_openai_app`` starts vLLM's OpenAI server with each
``args.llm_configs[].engine_kwargs`` passed to vLLM's engine arguments
(https://docs.ray.io/en/latest/serve/llm/serving-llms.html; ray-project/kuberay
ray-operator/config/samples/vllm-serve-llm samples). The kwargs are engine-argument
names, so each one is read like a ``--config`` item (``tensor_parallel_size: 2`` is
``--tensor-parallel-size 2``), at the line it was written in the embedded YAML; each
app's and LLM config's ``runtime_env.env_vars`` are the server's environment.

An application whose ``import_path`` is user code (ray-project/kuberay
ray-operator/config/samples/vllm/ray-service.vllm.yaml: ``serve:model`` configured by
``runtime_env.env_vars``) passes vLLM whatever the code decides. Only what its config
writes as engine arguments is read (``args.engine_kwargs``, ``args.llm_configs[]``, or
``args`` whose keys are mostly vLLM flags); an app with none is reported as skipped,
user code (:func:`unread_apps`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.detect import known_flag_spellings
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import EnvAssignment, Invocation, Location, Suppression
from kvtool.errors import KvtoolError

SERVE_LLM = "ray.serve.llm"


def read_serve_config(
    node: yaml.Node,
    text: str,
    source: ReadSource,
    owner: str,
    suppressions: tuple[Suppression, ...],
) -> list[Invocation]:
    """One invocation per Ray Serve LLM config in ``spec.serveConfigV2``, and one per
    user-code application whose config carries vLLM engine arguments; none otherwise."""
    embedded = _serve_config(node, text, source.file)
    if embedded is None:
        return []
    root, locate, inner_name = embedded
    label = f"{source.file or '<input>'}: {owner} Ray Serve"
    found: list[Invocation] = []
    for app in yaml_tree.sequence(yaml_tree.get(root, "applications")):
        app_name = yaml_tree.scalar(yaml_tree.get(app, "name")) or "?"
        import_path = yaml_tree.scalar(yaml_tree.get(app, "import_path")) or ""
        app_env = _env_vars(app, locate)
        if import_path.startswith(SERVE_LLM):
            for config in yaml_tree.sequence(yaml_tree.get_path(app, "args", "llm_configs")):
                items = _model_items(config, locate) + _kwarg_items(
                    yaml_tree.get(config, "engine_kwargs"), locate, inner_name
                )
                found.append(
                    Invocation(
                        kind="kubernetes",
                        label=f"{label} LLM app {app_name}",
                        file=source.file,
                        config_items=tuple(items),
                        env=app_env + _env_vars(config, locate),
                        suppressions=suppressions,
                        notes=("Ray Serve LLM passes engine_kwargs to vLLM's engine arguments",),
                    )
                )
            continue
        kwargs = _user_code_kwargs(app)
        if not kwargs:
            continue
        items = [i for k in kwargs for i in _kwarg_items(k, locate, inner_name)]
        found.append(
            Invocation(
                kind="kubernetes",
                label=f"{label} app {app_name} (user code {import_path})",
                file=source.file,
                config_items=tuple(items),
                env=app_env,
                suppressions=suppressions,
                notes=(
                    f"app {app_name} runs user code ({import_path}): only the engine "
                    "arguments written in its config and its runtime_env env_vars were "
                    "read; what the code itself passes to vLLM is not known",
                ),
            )
        )
    return found


def skip_user_code(documents: list[yaml.Node], text: str, file: str | None) -> None:
    """For a file that started no server: raise ``NoServerCommand`` saying "user code"
    when that is why (a RayService whose apps are user code with nothing readable)."""
    unread = [app for document in documents for app in unread_apps(document, text, file)]
    if unread:
        from kvtool.audit.inputs import NoServerCommand

        raise NoServerCommand(
            f"{file or '<input>'}: user code ({'; '.join(unread)}): how it starts vLLM "
            "is not in the manifest"
        )


def unread_apps(node: yaml.Node, text: str, file: str | None) -> list[str]:
    """The user-code applications of a RayService that give vLLM nothing readable."""
    if yaml_tree.scalar(yaml_tree.get(node, "kind")) != "RayService":
        return []
    try:
        embedded = _serve_config(node, text, file)
    except KvtoolError:
        return []  # reported when the file was read
    if embedded is None:
        return []
    unread: list[str] = []
    for app in yaml_tree.sequence(yaml_tree.get(embedded[0], "applications")):
        import_path = yaml_tree.scalar(yaml_tree.get(app, "import_path")) or "?"
        if not import_path.startswith(SERVE_LLM) and not _user_code_kwargs(app):
            name = yaml_tree.scalar(yaml_tree.get(app, "name")) or "?"
            unread.append(f"Ray Serve app {name} runs {import_path}")
    return unread


Locate = Callable[[yaml.Node], Location]


def _serve_config(
    node: yaml.Node, text: str, file: str | None
) -> tuple[yaml.Node, Locate, str] | None:
    """The composed ``spec.serveConfigV2`` string, and how to locate its nodes in ``text``."""
    value_node = yaml_tree.get_path(node, "spec", "serveConfigV2")
    value = yaml_tree.scalar(value_node)
    if value is None or not isinstance(value_node, yaml.ScalarNode):
        return None
    start, end = yaml_tree.scalar_source_span(value_node, text)
    mapping = OffsetMap.align(value, text, start, end)
    index = LineIndex(text, file)

    def locate(inner: yaml.Node) -> Location:
        begin = mapping.to_source(inner.start_mark.index)
        return index.location(begin, mapping.to_source(inner.end_mark.index))

    inner_name = f"{file or '<input>'} (serveConfigV2)"
    documents = yaml_tree.compose_documents(value, inner_name)
    if not documents:
        return None
    return documents[0], locate, inner_name


def _user_code_kwargs(app: yaml.Node) -> list[yaml.Node]:
    """Engine-argument mappings in a user-code app's ``args``: ``engine_kwargs``,
    ``llm_configs[].engine_kwargs``, or ``args`` itself when most keys are vLLM flags."""
    args = yaml_tree.get(app, "args")
    found: list[yaml.Node] = []
    direct = yaml_tree.get(args, "engine_kwargs")
    if isinstance(direct, yaml.MappingNode):
        found.append(direct)
    for config in yaml_tree.sequence(yaml_tree.get(args, "llm_configs")):
        kwargs = yaml_tree.get(config, "engine_kwargs")
        if isinstance(kwargs, yaml.MappingNode):
            found.append(kwargs)
    if not found and isinstance(args, yaml.MappingNode):
        keys = [key for key, _, _ in yaml_tree.items(args)]
        flags = known_flag_spellings()
        hits = sum(1 for key in keys if "--" + key.replace("_", "-") in flags)
        if keys and hits * 2 > len(keys):
            found.append(args)
    return found


def _model_items(config: yaml.Node, locate: Locate) -> list[tuple[str, Any, Location | None]]:
    loading = yaml_tree.get(config, "model_loading_config")
    model = yaml_tree.get(loading, "model_source") or yaml_tree.get(loading, "model_id")
    return [("model", yaml_tree.scalar(model), locate(model))] if model is not None else []


def _kwarg_items(
    kwargs: yaml.Node | None, locate: Locate, inner_name: str
) -> list[tuple[str, Any, Location | None]]:
    """Each engine kwarg as a ``--config`` item (``tensor_parallel_size: 2`` is
    ``--tensor-parallel-size 2``), located at its key."""
    return [
        (key.replace("_", "-"), yaml_tree.construct(value, inner_name), locate(key_node))
        for key, key_node, value in yaml_tree.items(kwargs)
    ]


def _env_vars(node: yaml.Node, locate: Locate) -> tuple[EnvAssignment, ...]:
    """``runtime_env.env_vars`` of an app or an LLM config: set for vLLM's process."""
    return tuple(
        EnvAssignment(name=key, value=yaml_tree.scalar(value), location=locate(key_node))
        for key, key_node, value in yaml_tree.items(
            yaml_tree.get_path(node, "runtime_env", "env_vars")
        )
    )


def read_job_entrypoint(
    node: yaml.Node,
    text: str,
    source: ReadSource,
    owner: str,
    suppressions: tuple[Suppression, ...],
) -> list[Invocation]:
    """A RayJob's ``spec.entrypoint``: the shell command Ray runs on the head node
    (ray-project/kuberay ray-operator/config/samples/ray-job.*.yaml)."""
    entry = yaml_tree.get_path(node, "spec", "entrypoint")
    found = yaml_tree.scalar_script(entry, text, LineIndex(text, source.file))
    if found is None:
        return []
    script, locate = found
    context = ShellContext(
        file=source.file,
        kind="kubernetes",
        base_dir=source.base_dir,
        label=f"{source.file or '<input>'}: {owner} entrypoint",
        suppressions=suppressions,
    )
    return read_script(script, locate, context)
