"""IM001: the audit reports a connector whose package the inspected image lacks or breaks.

Verdicts reach the rule through ``ctx.extras["image_verdicts"]``, in the shape
``kvtool.image.load_image_verdicts`` reads from an inspect-image JSON report.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from kvtool.audit.engine import Selection, check_config
from kvtool.audit.model import Finding
from kvtool.audit.rules.image import IMAGE_VERDICTS
from kvtool.image import load_image_verdicts
from kvtool.image.model import Connector, ConnectorVerdict, Verdict
from tests.audit.rulekit import config, context, ktc, opt
from tests.image.images import Image, docker_save
from tests.image.stubs import LIBCUDART


def verdict(connector: str, state: Verdict, error: str | None = None) -> ConnectorVerdict:
    return ConnectorVerdict(
        connector=Connector(connector), verdict=state, reason="test", error=error
    )


def im001(cfg: Any, verdicts: dict[str, ConnectorVerdict]) -> list[Finding]:
    ctx = dataclasses.replace(context(cfg), extras={IMAGE_VERDICTS: verdicts})
    return check_config(ctx, Selection(enabled={"IM001"}))


NIXL = ktc(kv_connector="NixlConnector", kv_role="kv_both")


def test_broken_nixl_is_an_error_with_the_import_error() -> None:
    findings = im001(
        config("0.32.0", NIXL),
        {"nixl": verdict("nixl", Verdict.broken, f"ImportError: {LIBCUDART}")},
    )
    assert len(findings) == 1
    assert findings[0].severity.value == "error"
    assert findings[0].flag == "--kv-transfer-config"
    assert "has a broken nixl: ImportError: libcudart.so.12" in findings[0].message


def test_lmcache_backend_maps_to_its_connector() -> None:
    # sizing.md decision 3: at 0.32.0 --kv-offloading-backend lmcache loads LMCacheMPConnector.
    cfg = config(
        "0.32.0", opt("--kv-offloading-backend", "lmcache"), opt("--kv-offloading-size", "100")
    )
    findings = im001(cfg, {"lmcache": verdict("lmcache", Verdict.not_bundled)})
    assert [f.evidence["connector"] for f in findings] == ["LMCacheMPConnector"]


def test_multiconnector_child_is_checked() -> None:
    multi = ktc(
        kv_connector="MultiConnector",
        kv_role="kv_both",
        kv_connector_extra_config={
            "connectors": [
                {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"},
            ]
        },
    )
    findings = im001(config("0.32.0", multi), {"nixl": verdict("nixl", Verdict.not_bundled)})
    assert [f.evidence["connector"] for f in findings] == ["NixlConnector"]


def test_unknown_bundled_or_absent_verdicts_are_silent() -> None:
    cfg = config("0.32.0", NIXL)
    assert im001(cfg, {"nixl": verdict("nixl", Verdict.unknown)}) == []
    assert im001(cfg, {"nixl": verdict("nixl", Verdict.bundled)}) == []
    assert im001(cfg, {}) == []
    native = config("0.32.0", opt("--kv-offloading-size", "100"))
    assert im001(native, {"nixl": verdict("nixl", Verdict.not_bundled)}) == []


def test_saved_inspect_image_report_feeds_the_rule(tmp_path: Path, kvtool_cli: Any) -> None:
    archive = tmp_path / "image.tar"
    docker_save(archive, Image(kv=False), "docker.io/vllm/vllm-openai:v0.32.0", "legacy")
    result = kvtool_cli("inspect-image", str(archive), "--output-format", "json")
    report = tmp_path / "verdicts.json"
    report.write_text(result.stdout)
    findings = im001(config("0.32.0", NIXL), load_image_verdicts(report))
    assert len(findings) == 1
    assert "does not bundle nixl (built with INSTALL_KV_CONNECTORS=false" in findings[0].message


def test_unreadable_verdicts_file_is_a_one_line_error(tmp_path: Path) -> None:
    import pytest

    from kvtool.errors import KvtoolError

    bad = tmp_path / "verdicts.json"
    bad.write_text(json.dumps({"verdicts": "nope"}))
    with pytest.raises(KvtoolError, match="not an inspect-image JSON report"):
        load_image_verdicts(bad)
