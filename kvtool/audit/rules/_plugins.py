"""Distributions that extend vLLM beyond its release (``rules/curated/plugin_images.toml``).

An image that patches extra connectors into vLLM's factory (AIBrix) or a plugin CLI that
adds its own ``vllm serve`` flags (vLLM-Omni) makes names the release tables lack valid;
the version-gate rules ask here before calling such a name missing.
"""

from __future__ import annotations

from functools import cache

import msgspec

from kvtool.audit.context import RuleContext
from kvtool.errors import KvtoolError
from kvtool.releases.images import image_row, parse_image
from kvtool.resources import read_table, rules_dir

TABLE = "plugin_images.toml"


class PluginImage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    plugin: str  # the distribution's name, as a user knows it
    repository: str  # "owner/name" without registry host, tag or digest
    tag_contains: str | None = None  # the row holds only for tags with this text
    connectors: tuple[str, ...] = ()  # names the image registers in KVConnectorFactory
    marker_flags: tuple[str, ...] = ()  # flags that hand the command to the plugin's CLI
    plugin_flags: bool = False  # the plugin's CLI adds serve flags the tables cannot list
    source: str

    def same_repository(self, image: str) -> bool:
        repository = parse_image(image).repository
        return repository == self.repository or repository.endswith("/" + self.repository)

    def holds_for(self, image: str) -> bool:
        if not self.same_repository(image):
            return False
        tag = parse_image(image).tag or ""
        return self.tag_contains is None or self.tag_contains in tag.lower()


@cache
def plugin_images() -> tuple[PluginImage, ...]:
    """The table's rows; ``KvtoolError`` when it is malformed."""
    path = rules_dir() / "curated" / TABLE
    try:
        return msgspec.convert(read_table(path).get("rows", []), type=tuple[PluginImage, ...])
    except msgspec.ValidationError as exc:
        raise KvtoolError(f"curated table {path}: {exc}") from exc


def _image(ctx: RuleContext) -> str | None:
    return ctx.config.invocation.image


def image_plugin(ctx: RuleContext) -> PluginImage | None:
    """The row whose image (repository and tag) the engine runs in, if any."""
    image = _image(ctx)
    if image is None:
        return None
    return next((row for row in plugin_images() if row.holds_for(image)), None)


def image_is_unplaced(ctx: RuleContext) -> bool:
    """An image is named but kvtool knows neither it nor its repository: what it installs
    next to vLLM (plugin packages, patches) cannot be told."""
    image = _image(ctx)
    if image is None or image_row(image) is not None:
        return False
    return not any(row.same_repository(image) for row in plugin_images())


def image_may_bundle(ctx: RuleContext) -> bool:
    """The image's repository is a listed distribution whose tag rule did not match: some of
    its builds carry the plugin, and this tag does not say whether it is one."""
    image = _image(ctx)
    return image is not None and any(
        row.same_repository(image) and not row.holds_for(image) for row in plugin_images()
    )


def registering(connector: str) -> tuple[PluginImage, ...]:
    """Rows whose images register ``connector``."""
    return tuple(row for row in plugin_images() if connector in row.connectors)


def plugin_cli(ctx: RuleContext) -> PluginImage | None:
    """The plugin CLI that parses this command's flags, when one does: the image is a plugin
    distribution, or a marker flag (``--omni``) hands the command to the plugin on an image
    kvtool cannot place. A marker flag on a plain vLLM image stays vLLM's to refuse."""
    found = image_plugin(ctx)
    if found is not None and found.plugin_flags:
        return found
    image = _image(ctx)
    if image is not None and image_row(image) is not None:
        return None  # a known image that is not this plugin's
    written = {opt.flag for opt in ctx.config.options}
    return next(
        (
            row
            for row in plugin_images()
            if row.plugin_flags and written.intersection(row.marker_flags)
        ),
        None,
    )
