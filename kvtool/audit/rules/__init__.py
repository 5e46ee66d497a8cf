"""Every audit rule, one module per family (the explicit list is the registry's source).

Importing this package registers all rules in :data:`kvtool.audit.registry.registry`.
A new family module is added to the import list below; nothing is discovered implicitly.
"""

# One line per module: importing it registers its rules ("X as X" marks the import as
# the package's own, so it needs no second list).
from kvtool.audit.rules import connectors as connectors
from kvtool.audit.rules import deployment as deployment
from kvtool.audit.rules import disagg as disagg
from kvtool.audit.rules import disktier as disktier
from kvtool.audit.rules import extra_config as extra_config
from kvtool.audit.rules import geometry as geometry
from kvtool.audit.rules import hostmem as hostmem
from kvtool.audit.rules import image as image
from kvtool.audit.rules import jsonflags as jsonflags
from kvtool.audit.rules import known_bugs as known_bugs
from kvtool.audit.rules import lazy as lazy
from kvtool.audit.rules import lmcache as lmcache
from kvtool.audit.rules import meta as meta
from kvtool.audit.rules import models as models
from kvtool.audit.rules import podmem as podmem
from kvtool.audit.rules import sizing as sizing
from kvtool.audit.rules import versiongates as versiongates
