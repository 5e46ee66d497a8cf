"""Every audit rule, one module per family (the explicit list is the registry's source).

Importing this package registers all rules in :data:`kvtool.audit.registry.registry`.
A new family module is added to the import list below; nothing is discovered implicitly.
"""

from kvtool.audit.rules import (
    connectors,
    deployment,
    disagg,
    disktier,
    extra_config,
    geometry,
    hostmem,
    image,
    jsonflags,
    known_bugs,
    lazy,
    lmcache,
    meta,
    models,
    podmem,
    sizing,
    versiongates,
)

FAMILY_MODULES = (
    versiongates,
    jsonflags,
    connectors,
    models,
    sizing,
    hostmem,
    podmem,
    disktier,
    geometry,
    lazy,
    lmcache,
    extra_config,
    disagg,
    deployment,
    known_bugs,
    image,
    meta,
)
