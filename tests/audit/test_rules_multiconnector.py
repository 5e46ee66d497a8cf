"""HMA and connector rules through MultiConnector children and classes loaded by module path.

vLLM 0.32.0 decides HMA support in ``KVConnectorFactory.supports_hma_config``
(vllm/distributed/kv_transfer/kv_connector/factory.py, lines 131-146 at v0.32.0): a
connector named ``MultiConnector`` is judged by ``MultiConnector.all_children_support_hma``
(every child must support HMA; v1/multi_connector.py lines 158-172), any other name by its
own class, and ``get_connector_class`` loads ``kv_connector_module_path`` before the registry
(factory.py lines 103-128). A MultiConnector subclass inherits ``SupportsHMA``.
"""

from __future__ import annotations

from typing import Any

from tests.audit.rulekit import codes, config, ktc, only, opt, run

QWEN35 = "Qwen/Qwen3.5-27B"  # attention + Gated DeltaNet: HMA off stops it at start-up
NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
LMCACHE_V1 = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
PRIVATE = {"kv_connector": "AcmeStore", "kv_connector_module_path": "acme.kv", "kv_role": "kv_both"}


def multi(*children: dict[str, Any], **fields: Any) -> Any:
    return ktc(
        kv_connector=fields.pop("kv_connector", "MultiConnector"),
        kv_role="kv_both",
        kv_connector_extra_config={"connectors": list(children)},
        **fields,
    )


def test_registered_multiconnector_is_judged_by_its_children() -> None:
    # One child without SupportsHMA (LMCacheConnectorV1) turns HMA off: the state hybrid fails.
    found = run(config("0.32.0", multi(NIXL, LMCACHE_V1), model=QWEN35))
    assert only(found, "CN011").severity.value == "error"
    assert "CN014" not in codes(found)


def test_a_multiconnector_subclass_by_module_path_is_not_judged_by_its_children() -> None:
    # The subclass inherits SupportsHMA, so vLLM keeps HMA on: reporting "HMA off" (CN011)
    # would be false. The audit says once that it could not decide.
    subclass = multi(
        NIXL, LMCACHE_V1, kv_connector="TieredMultiConnector", kv_connector_module_path="acme.kv"
    )
    found = run(config("0.32.0", subclass, model=QWEN35))
    assert "CN011" not in codes(found) and "CN013" not in codes(found)
    info = only(found, "CN014")
    assert info.severity.value == "info"
    assert "`TieredMultiConnector`" in info.message
    assert "VG020" not in codes(found)  # an external class is no unregistered name


def test_a_child_loaded_by_module_path_is_not_an_unknown_connector() -> None:
    found = run(config("0.32.0", multi(NIXL, PRIVATE), model=QWEN35))
    assert "VG020" not in codes(found)
    assert "`AcmeStore`" in only(found, "CN014").message
    # Nearest neighbour: the same child name without a module path is a registry lookup
    # that fails at start-up ("Unsupported connector type", factory.py line 128).
    unregistered = {"kv_connector": "AcmeStore", "kv_role": "kv_both"}
    assert "VG020" in codes(run(config("0.32.0", multi(NIXL, unregistered))))


def test_a_registered_child_without_hma_decides_whatever_the_external_one_says() -> None:
    # all_children_support_hma returns False at the first child that lacks HMA.
    found = run(config("0.32.0", multi(PRIVATE, LMCACHE_V1), model=QWEN35))
    assert only(found, "CN011").severity.value == "error"
    assert "CN014" not in codes(found)


def test_forcing_hma_on_with_an_external_class_is_not_reported_as_a_refusal() -> None:
    force_on = opt(
        "--disable-hybrid-kv-cache-manager", False, written="--no-disable-hybrid-kv-cache-manager"
    )
    found = run(config("0.32.0", ktc(**PRIVATE), force_on))
    assert "CN012" not in codes(found)
    assert "CN014" in codes(found)
    # Nearest neighbour: a registered connector without SupportsHMA is refused by the factory.
    refused = run(config("0.32.0", ktc(**LMCACHE_V1), force_on))
    assert "CN012" in codes(refused) and "CN014" not in codes(refused)


def test_before_the_per_connector_decision_the_class_does_not_matter() -> None:
    # On 0.13-0.21 any --kv-transfer-config turns HMA off when the flag is unset (release
    # tables: hma.mode "when_unset"), whatever class it loads.
    found = run(config("0.21.0", ktc(**PRIVATE), model=QWEN35))
    assert only(found, "CN011").severity.value == "error"
    assert "CN014" not in codes(found)


def test_a_connectors_list_under_another_connector_is_not_read() -> None:
    # Only MultiConnector reads kv_connector_extra_config.connectors
    # (v1/multi_connector.py, _get_connector_classes_and_configs at v0.32.0): under
    # NixlConnector (SupportsHMA) the list is inert, so HMA stays on.
    stray = ktc(
        kv_connector="NixlConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"connectors": [LMCACHE_V1]},
    )
    assert "CN011" not in codes(run(config("0.32.0", stray, model=QWEN35)))
    assert "CN011" in codes(run(config("0.32.0", multi(LMCACHE_V1), model=QWEN35)))
