"""VG: version gates. Every fact comes from the generated release table of the
target release and the cross-release index (``rules/releases/``); no version is
written here. One module per sub-family; the import list below is the family's whole
registry.
"""

# One line per module: importing it registers its rules ("X as X" marks the import as
# the package's own, so it needs no second list).
from kvtool.audit.rules.versiongates import connector_names as connector_names
from kvtool.audit.rules.versiongates import env_vars as env_vars
from kvtool.audit.rules.versiongates import flag_values as flag_values
from kvtool.audit.rules.versiongates import flags as flags
from kvtool.audit.rules.versiongates import offload_specs as offload_specs
from kvtool.audit.rules.versiongates import transfer_config as transfer_config
