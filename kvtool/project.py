"""Where kvtool lives publicly: the one place user-facing links to its own files start.

Findings' ``docs`` links, SARIF ``helpUri`` and the package metadata point at files of
this repository at the release's tag, so a link printed by kvtool X.Y.Z opens the
documentation of X.Y.Z.
"""

from kvtool import __version__

REPOSITORY_URL = "https://github.com/kvtool/kvtool"


def repository_file_url(path: str, anchor: str | None = None) -> str:
    """The public URL of ``path`` (relative to the repository root) at this release's tag."""
    url = f"{REPOSITORY_URL}/blob/v{__version__}/{path}"
    return f"{url}#{anchor}" if anchor else url
