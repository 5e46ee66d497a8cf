#!/usr/bin/env python3
"""Generate ``rules/kaito/presets.toml`` from KAITO's source at a release tag.

    python scripts/gen_kaito_presets.py --kaito-git DIR                # tag DEFAULT_TAG
    python scripts/gen_kaito_presets.py --kaito-git DIR --tag v0.12.0
    python scripts/gen_kaito_presets.py --kaito-git DIR --check        # exit 1 on drift

``DIR`` is a git directory of kaito-project/kaito (a clone or a bare mirror); files are
read with ``git show TAG:PATH``, never from a work tree. A KAITO ``Workspace`` or
``InferenceSet`` that names only ``inference.preset.name`` gets its vLLM command from
KAITO's controller (``pkg/model/interface.go`` ``buildVLLMInferenceCommand``). The
facts that command depends on, each with the file and line it was read at:

- the preset name -> HuggingFace model id map (``pkg/utils/plugin/plugin.go``
  ``LegacyBuiltinToCatalog``), with each model's weight size and quantisation from
  ``presets/workspace/models/model_catalog.yaml`` (the size decides data vs tensor
  parallelism, the quantisation ``--dtype``);
- the words KAITO's preset generator adds per model (``presets/workspace/generator/
  generator.go`` ``ParseModelMetadata``/``FinalizeParams``: tokenizer, load and config
  formats, tool-call and reasoning parsers, chat template, KV cache dtype and backends by
  model-name prefix or architecture; ``vllm_model.go`` ``GetInferenceParameters``:
  ``--dtype``, ``--trust-remote-code``), for the preset's catalog entry;
- the wrapper command (``presets/workspace/models/metadata.go`` ``DefaultVLLMCommand``);
- ``--gpu-memory-utilization`` (``defaultGPUMemoryUtilization`` and its per-GPU overrides);
- where the inference ConfigMap is mounted (``pkg/utils/common_preset.go``
  ``DefaultConfigMapMountPath`` + ``ConfigfileNameVLLM``);
- the GPU count and memory of each instance type KAITO knows (``pkg/sku/*_sku_handler.go``);
- the annotation that moves a workspace to the Hugging Face transformers runtime, which
  starts no vLLM (``api/v1beta1/labels.go`` ``GetWorkspaceRuntimeName``).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_files import write_or_check

_REPO = Path(__file__).resolve().parent.parent
OUTPUT = _REPO / "rules" / "kaito" / "presets.toml"
DEFAULT_TAG = "v0.12.0"
GENERATOR_VERSION = 1
BLOB = "https://github.com/kaito-project/kaito/blob"

PLUGIN = "pkg/utils/plugin/plugin.go"
CATALOG = "presets/workspace/models/model_catalog.yaml"
METADATA = "presets/workspace/models/metadata.go"
INTERFACE = "pkg/model/interface.go"
COMMON_PRESET = "pkg/utils/common_preset.go"
GENERATOR = "presets/workspace/generator/generator.go"
VLLM_MODEL = "presets/workspace/models/vllm_model.go"
CHAT_TEMPLATES = "/workspace/chat_templates/"
LABELS = "api/v1beta1/labels.go"
SKU_FILES = ("pkg/sku/azure_sku_handler.go", "pkg/sku/aws_sku_handler.go")

_MAP_ENTRY = re.compile(r'^\s*"([^"]+)":\s*("[^"]*"|true|false),')
_SKU = re.compile(
    r'\{SKU: "([^"]+)", GPUCount: (\d+), GPUMem: resource\.MustParse\("(\d+)Gi"\), '
    r'GPUModel: "([^"]+)"'
)


@dataclass(frozen=True)
class Fact:
    value: str
    line: int


class KaitoSource:
    def __init__(self, git_dir: Path, tag: str) -> None:
        self.git_dir = git_dir
        self.tag = tag
        self.commit = self._git("rev-parse", f"{tag}^{{commit}}").strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.git_dir), *args], capture_output=True, text=True, check=True
        ).stdout

    def lines(self, path: str) -> list[str]:
        return self._git("show", f"{self.commit}:{path}").splitlines()

    def url(self, path: str, line: int | None = None) -> str:
        return f"{BLOB}/{self.commit}/{path}" + (f"#L{line}" if line else "")

    def constant(self, path: str, name: str) -> Fact:
        """A Go string constant ``name = "value"``."""
        pattern = re.compile(rf'^\s*(?:const\s+|var\s+)?{re.escape(name)}\s*=\s*"([^"]*)"')
        for number, line in enumerate(self.lines(path), 1):
            match = pattern.match(line)
            if match:
                return Fact(match.group(1), number)
        raise SystemExit(f"{path}@{self.tag}: no string constant {name}")

    def prefixed(self, path: str, name: str, prefix: str) -> Fact:
        """A Go constant ``name = prefix + "suffix"`` (``prefix`` a string constant)."""
        head = self.constant(path, prefix).value
        pattern = re.compile(rf'^\s*{re.escape(name)}\s*=\s*{re.escape(prefix)}\s*\+\s*"([^"]*)"')
        for number, line in enumerate(self.lines(path), 1):
            match = pattern.match(line)
            if match:
                return Fact(head + match.group(1), number)
        raise SystemExit(f"{path}@{self.tag}: no constant {name} = {prefix} + ...")

    def string_map(self, path: str, name: str) -> dict[str, Fact]:
        """The literal entries of ``var name = map[string]string{...}``."""
        found: dict[str, Fact] = {}
        inside = False
        for number, line in enumerate(self.lines(path), 1):
            if not inside:
                inside = bool(re.match(rf"^\s*(var\s+)?{re.escape(name)}\s*=\s*map\[", line))
                if inside and line.rstrip().endswith("{}"):
                    return found
                continue
            if line.strip() == "}":
                return found
            match = _MAP_ENTRY.match(line)
            if match:
                found[match.group(1)] = Fact(match.group(2).strip('"'), number)
        raise SystemExit(f"{path}@{self.tag}: no map {name}")


def _typed_constant(source: KaitoSource, path: str, name: str) -> Fact:
    """A Go constant ``name Type = "value"``."""
    pattern = re.compile(rf'^\s*{re.escape(name)}\s+\w+\s*=\s*"([^"]*)"')
    for number, line in enumerate(source.lines(path), 1):
        match = pattern.match(line)
        if match:
            return Fact(match.group(1), number)
    raise SystemExit(f"{path}@{source.tag}: no typed constant {name}")


class GeneratorMaps:
    """The lookup tables of KAITO's preset generator, by Go variable name."""

    def __init__(self, source: KaitoSource) -> None:
        self.source = source
        self.maps: dict[str, dict[str, Fact]] = {}

    def __getitem__(self, name: str) -> dict[str, str]:
        if name not in self.maps:
            self.maps[name] = self.source.string_map(GENERATOR, name)
        return {key: fact.value for key, fact in self.maps[name].items()}

    def by_prefix(self, name: str, model: str) -> str | None:
        """``for prefix, v := range m { if HasPrefix(model, prefix) { ...; break } }``: Go's
        map order is random, so two matching prefixes would make KAITO's choice random."""
        hits = [value for prefix, value in self[name].items() if model.startswith(prefix)]
        if len(hits) > 1 and len(set(hits)) > 1:
            raise SystemExit(f"{GENERATOR}: {model} matches several {name} prefixes: {hits}")
        return hits[0] if hits else None


def preset_words(maps: GeneratorMaps, entry: dict[str, object]) -> list[tuple[str, str]]:
    """The run params KAITO's generator and GetInferenceParameters give a catalog model."""
    name = str(entry["name"]).rsplit("/", 1)[-1].lower()  # NewGenerator's modelNameSafe
    architectures = [str(a) for a in entry.get("architectures") or []]  # type: ignore[attr-defined]
    load_format = str(entry.get("loadFormat") or "auto")
    words: dict[str, str] = {
        "load_format": load_format,
        "config_format": str(entry.get("configFormat") or entry.get("loadFormat") or "auto"),
        "tokenizer_mode": str(entry.get("tokenizerMode") or entry.get("loadFormat") or "auto"),
    }
    tokenizer = maps.by_prefix("tokenizerModePrefixMap", name)
    if tokenizer:
        words["tokenizer_mode"] = tokenizer
    for map_name, flag in (
        ("vllmAttentionBackendPrefixMap", "attention-backend"),
        ("vllmKVCacheDtypePrefixMap", "kv-cache-dtype"),
        ("vllmGdnPrefillBackendPrefixMap", "gdn-prefill-backend"),
    ):
        value = maps.by_prefix(map_name, name)
        if value:
            words[flag] = value
    moe = maps["vllmMoeBackendOverride"].get(name)
    if moe:
        words["moe-backend"] = moe
    if maps.by_prefix("vllmExpertParallelEnabled", name) == "true":
        words["enable-expert-parallel"] = ""
    if maps.by_prefix("vllmDisableFlashInferAutotunePrefixMap", name) == "true":
        words["kernel-config.enable_flashinfer_autotune"] = "False"
    words["trust-remote-code"] = ""
    words["dtype"] = "auto" if entry.get("quantMethod") else "bfloat16"
    tool_parsers = maps["toolCallParserModeNamePrefixMap"]
    tool = next(
        (tool_parsers[p] for p in sorted(tool_parsers, reverse=True) if name.startswith(p)), None
    ) or next((maps["toolCallParserArchMap"][a] for a in architectures
               if a in maps["toolCallParserArchMap"]), None)  # fmt: skip
    if tool:
        words["tool-call-parser"] = tool
        words["enable-auto-tool-choice"] = ""
    template = maps.by_prefix("chatTemplatePrefixMap", name)
    if template:
        words["chat-template"] = CHAT_TEMPLATES + template
    if name not in maps["nonReasoningModels"]:
        reasoning = maps.by_prefix("reasoningParserModeNamePrefixMap", name) or next(
            (maps["reasoningParserArchMap"][a] for a in architectures
             if a in maps["reasoningParserArchMap"]), None)  # fmt: skip
        if reasoning:
            words["reasoning-parser"] = reasoning
    return list(words.items())


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _gib(size: str) -> float:
    match = re.fullmatch(r"([\d.]+)Gi", size)
    if match is None:
        raise SystemExit(f"{CATALOG}: model size {size!r} is not in Gi")
    return float(match.group(1))


def render(source: KaitoSource) -> str:
    command = source.constant(METADATA, "DefaultVLLMCommand")
    utilization = source.constant(INTERFACE, "defaultGPUMemoryUtilization")
    mount = source.constant(COMMON_PRESET, "DefaultConfigMapMountPath")
    config_file = source.constant(INTERFACE, "ConfigfileNameVLLM")
    weights = source.constant(COMMON_PRESET, "DefaultWeightsVolumePath")
    overrides = source.string_map(INTERFACE, "gpuMemoryUtilizationByGPUModel")
    runtime_annotation = source.prefixed(LABELS, "AnnotationWorkspaceRuntime", "KAITOPrefix")
    transformers = _typed_constant(source, INTERFACE, "RuntimeNameHuggingfaceTransformers")
    presets = source.string_map(PLUGIN, "LegacyBuiltinToCatalog")
    maps = GeneratorMaps(source)
    catalog_lines = source.lines(CATALOG)
    catalog = yaml.safe_load("\n".join(catalog_lines))["models"]
    by_id = {entry["name"].lower(): entry for entry in catalog}
    entry_line = {
        line[len("- name: ") :].strip().lower(): number
        for number, line in enumerate(catalog_lines, 1)
        if line.startswith("- name: ")
    }
    out = [
        "# Generated by scripts/gen_kaito_presets.py from kaito-project/kaito; do not edit.",
        "# What KAITO's controller generates for a preset-only Workspace/InferenceSet",
        "# (pkg/model/interface.go buildVLLMInferenceCommand).",
        f"generator_version = {GENERATOR_VERSION}",
        f"kaito_tag = {_toml(source.tag)}",
        f"kaito_commit = {_toml(source.commit)}",
        f"base_command = {_toml(command.value)}",
        f"base_command_source = {_toml(source.url(METADATA, command.line))}",
        f"gpu_memory_utilization = {_toml(utilization.value)}",
        f"gpu_memory_utilization_source = {_toml(source.url(INTERFACE, utilization.line))}",
        f"config_file = {_toml(mount.value + '/' + config_file.value)}",
        f"config_file_source = {_toml(source.url(COMMON_PRESET, mount.line))}",
        f"download_dir = {_toml(weights.value)}",
        f"download_dir_source = {_toml(source.url(COMMON_PRESET, weights.line))}",
        f"command_source = {_toml(source.url(INTERFACE))}",
        f"words_source = {_toml(source.url(GENERATOR))}",
        f"runtime_annotation = {_toml(runtime_annotation.value)}",
        f"transformers_runtime = {_toml(transformers.value)}",
        f"runtime_source = {_toml(source.url(LABELS, runtime_annotation.line))}",
        "",
        "[gpu_memory_utilization_by_gpu]",
    ]
    out += [f"{_toml(gpu)} = {_toml(fact.value)}" for gpu, fact in sorted(overrides.items())]
    for preset, fact in sorted(presets.items()):
        entry = by_id.get(fact.value.lower())
        if entry is None:
            raise SystemExit(f"{CATALOG}@{source.tag}: no model {fact.value} (preset {preset})")
        out += [
            "",
            "[[preset]]",
            f"name = {_toml(preset)}",
            # The generator runs on the lowercased map value: --model is that id, and
            # --served-model-name its last part (NewGenerator's modelNameSafe).
            f"model = {_toml(fact.value)}",
            f"served_model_name = {_toml(fact.value.rsplit('/', 1)[-1].lower())}",
            f"model_file_size_gib = {_gib(entry['modelFileSize'])!r}",
            "words = ["
            + ", ".join(f"[{_toml(k)}, {_toml(v)}]" for k, v in preset_words(maps, entry))
            + "]",
            f"source = {_toml(source.url(PLUGIN, fact.line))}",
            f"catalog_source = {_toml(source.url(CATALOG, entry_line[fact.value.lower()]))}",
        ]
    for path in SKU_FILES:
        for number, line in enumerate(source.lines(path), 1):
            match = _SKU.search(line)
            if match is None or line.lstrip().startswith("//"):
                continue
            sku, count, memory, gpu = match.groups()
            out += [
                "",
                "[[instance_type]]",
                f"name = {_toml(sku)}",
                f"gpu_count = {int(count)}",
                f"gpu_memory_gib = {int(memory)}",
                f"gpu_model = {_toml(gpu)}",
                f"source = {_toml(source.url(path, number))}",
            ]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kaito-git", type=Path, required=True, help="kaito-project/kaito git dir")
    parser.add_argument("--tag", default=DEFAULT_TAG, help="KAITO release tag to read")
    parser.add_argument("--check", action="store_true", help="exit 1 when the table drifts")
    args = parser.parse_args()
    text = render(KaitoSource(args.kaito_git, args.tag))
    command = f"python scripts/gen_kaito_presets.py --kaito-git DIR --tag {args.tag}"
    return write_or_check({OUTPUT: text}, command, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
