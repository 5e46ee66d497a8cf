"""IM: image bundling, shared with ``kvtool inspect-image``.

The rules read verdicts the engine put in ``ctx.extras[IMAGE_VERDICTS]``: a mapping
from connector package ("lmcache", "nixl", "mooncake") to an inspect-image
:class:`~kvtool.image.model.ConnectorVerdict` (from ``kvtool audit --image-verdicts FILE``,
an inspect-image JSON report). No verdicts, no findings: the rules never inspect anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import (
    vllm_issue,
    vllm_source,
)
from kvtool.audit.registry import ConfigRule, register

if TYPE_CHECKING:
    from kvtool.image.model import ConnectorVerdict

IMAGE_VERDICTS = "image_verdicts"  # the ctx.extras key the engine fills


def image_verdicts(ctx: RuleContext) -> Mapping[str, ConnectorVerdict]:
    found: Any = ctx.extras.get(IMAGE_VERDICTS)
    return found if isinstance(found, Mapping) else {}


@register
class ConnectorNotBundledInImage(ConfigRule):
    """Reports a KV connector in the serve args whose package the image lacks or cannot import.

    What
    ----
    The connector vLLM will load (every child, for MultiConnector; the backend's connector
    for `--kv-offloading-backend`) needs LMCache, NIXL or Mooncake, and `kvtool
    inspect-image` found that package not bundled in the image, or bundled but broken
    (an import or a connector load fails).

    Why
    ---
    vLLM only imports the connector's package when the engine starts, so a missing or
    broken package surfaces as a crash after the pod is scheduled and the weights are
    downloading. Images differ: vLLM's own images were built without
    `INSTALL_KV_CONNECTORS` for months, and images built with it have shipped an
    `nixl_ep` or `mooncake.engine` linked against the wrong CUDA major.

    Example
    -------
    `--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'` with an
    image whose report says `nixl: broken (ImportError: libcudart.so.12 ...)`.

    Fix
    ---
    Use an image built with `INSTALL_KV_CONNECTORS=true` whose runtime check passes
    (`kvtool inspect-image IMAGE --check all`), or install the package matching the
    image's CUDA major. Unknown verdicts (rate limit, no engine, no GPU driver) are not
    reported: rerun the inspection.

    Releases
    --------
    Independent of the vLLM release: the verdict is about the image's contents.
    """

    code = "IM001"
    name = "connector-not-bundled-in-image"
    default_severity = Severity.error
    summary = "a KV connector in the serve args needs a package the image lacks or cannot import"
    references = (
        vllm_issue(39923, "an image's NIXL wheel built for another CUDA major broke every command"),
        vllm_source(
            "0.32.0", "docker/Dockerfile",
            "vLLM's Dockerfile at 0.32.0: INSTALL_KV_CONNECTORS decides the connector wheels",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        verdicts = image_verdicts(ctx)
        connector = ctx.connector
        if not verdicts or connector is None:
            return
        # Imported here: most audits carry no image verdicts, and the audit's cold
        # start should not pay for the image package's models.
        from kvtool.image.model import Verdict
        from kvtool.image.verdicts import connector_family

        location = ctx.connector_location
        flag = connector.option.flag if connector.option is not None else None
        for name in connector.names:
            family = connector_family(name)
            verdict = verdicts.get(family.value) if family is not None else None
            if verdict is None or verdict.verdict not in (Verdict.not_bundled, Verdict.broken):
                continue
            state = "does not bundle" if verdict.verdict is Verdict.not_bundled else "has a broken"
            detail = f": {verdict.error}" if verdict.error else f" ({verdict.reason})"
            yield self.finding(
                f"`{name}` needs {verdict.connector.value}, and the image {state} "
                f"{verdict.connector.value}{detail}",
                flag=flag,
                location=location,
                connector=name,
                package=verdict.connector.value,
                verdict=verdict.verdict.value,
                reason=verdict.reason,
            )
