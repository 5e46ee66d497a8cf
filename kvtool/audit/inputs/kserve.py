"""KServe's Hugging Face runtime: the vLLM engine arguments hidden in its ``args``.

An InferenceService that says ``predictor.model.modelFormat.name: huggingface`` runs
KServe's ``huggingfaceserver`` (the ``kserve-huggingfaceserver`` ClusterServingRuntime,
kserve/kserve config/runtimes/kserve-huggingfaceserver.yaml), as does a ServingRuntime
container on a ``kserve/huggingfaceserver`` image that gives only ``args``. That server
parses its own options together with vLLM's (``make_arg_parser``) and builds vLLM's
engine arguments from the result (kserve/kserve python/huggingfaceserver/huggingfaceserver
``__main__.py`` and ``vllm/utils.py``: ``AsyncEngineArgs.from_cli_args``), with
``args.model = model_id or model_dir``. So its ``args`` are read as ``vllm serve``
arguments once the server's own options are taken out: ``--model_id``/``--model_dir``
become the model, ``--max_length`` and ``--model_revision`` the vLLM options they set,
and KServe's model-server options (``--model_name``, ``--http_port``...) are dropped.
``--backend=huggingface`` or ``triton`` starts no vLLM engine at all.

The same mapping applies where a command or script starts the server itself, ``python -m
huggingfaceserver ARGS`` (the multinode runtime's ``bash -c`` body, kserve/kserve
config/runtimes/kserve-huggingfaceserver-multinode.yaml); ``--model_dir``'s default is
then located at the ``python`` word.

The server reads its options with ``parse_known_args``: an option neither it nor vLLM
knows is ignored, not refused (a note says so).
"""

from __future__ import annotations

import yaml

from kvtool.audit.inputs import yaml_tree
from kvtool.audit.inputs.command_line import ArgvWord
from kvtool.audit.inputs.huggingface_server import DEFAULT_MODEL_DIR
from kvtool.releases.images import parse_image

HUGGINGFACE_FORMAT = "huggingface"
VLLM_FORMAT = "vllm"
_SERVER_IMAGE = "huggingfaceserver"


def model_format(node: yaml.Node) -> str | None:
    """``modelFormat.name`` of a KServe ``predictor.model``, lower-cased."""
    name = yaml_tree.scalar(yaml_tree.get_path(node, "modelFormat", "name"))
    return name.lower() if name is not None else None


def runs_huggingface_server(container: yaml.Node, image: str | None) -> bool:
    """A predictor model on the huggingface format, or an args-only container of the
    runtime's image (``kserve/huggingfaceserver:v0.15.0``)."""
    if model_format(container) == HUGGINGFACE_FORMAT:
        return True
    if image is None or yaml_tree.get(container, "command") is not None:
        return False
    return parse_image(image).repository.rsplit("/", 1)[-1] == _SERVER_IMAGE


def default_model_word(node: yaml.Node, file: str | None) -> ArgvWord:
    """``--model_dir``'s default, located at ``storageUri`` (what is downloaded there)."""
    storage = yaml_tree.get(node, "storageUri")
    where = storage if storage is not None else node
    return ArgvWord(DEFAULT_MODEL_DIR, yaml_tree.location(where, file))
