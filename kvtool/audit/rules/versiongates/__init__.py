"""VG: version gates. Every fact comes from the generated release table of the
target release and the cross-release index (``rules/releases/``); no version is
written here. One module per sub-family; the import list below is the family's whole
registry.
"""

from kvtool.audit.rules.versiongates import (
    connector_names,
    env_vars,
    flag_values,
    flags,
    offload_specs,
    transfer_config,
)

__all__ = [
    "connector_names",
    "env_vars",
    "flag_values",
    "flags",
    "offload_specs",
    "transfer_config",
]
