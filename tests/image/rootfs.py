"""A tiny image rootfs, assembled offline from the Python running the tests.

The interpreter, its standard library (minus tests, GUI and bundled wheels) and
every shared library that ``ldd`` names for it and its extension modules are put
at the same absolute paths they have here, plus ``/usr/bin/python3``; fake
packages go to ``/opt/kvtool-stubs`` (on PYTHONPATH via the image's Env).
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

STUBS_DIR = "/opt/kvtool-stubs"
_SKIPPED_STDLIB = {
    "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
    "dist-packages", "__pycache__", "pydoc_data",
}  # fmt: skip
_LDD_PATH_RE = re.compile(r"(/\S+) \(0x")


def interpreter() -> Path:
    return Path(getattr(sys, "_base_executable", sys.executable)).resolve()


def shared_libraries(binaries: list[Path]) -> set[Path]:
    found: set[Path] = set()
    for start in range(0, len(binaries), 200):
        chunk = [str(b) for b in binaries[start : start + 200]]
        out = subprocess.run(["ldd", *chunk], capture_output=True, text=True, check=False).stdout
        found |= {Path(m) for m in _LDD_PATH_RE.findall(out)}
    return found


def _add_path(tar: tarfile.TarFile, path: Path) -> None:
    """Add ``path`` at its own absolute location, following symlinks to real files."""
    tar.add(str(path.resolve()), arcname=str(path).lstrip("/"), recursive=False)


def build_rootfs(target: Path, stubs: Path) -> None:
    python = interpreter()
    stdlib = Path(
        sysconfig.get_paths(scheme="posix_prefix", vars={"base": sys.base_prefix})["stdlib"]
    )
    dynload = stdlib / "lib-dynload"
    extensions = [e for e in sorted(dynload.glob("*.so")) if "tkinter" not in e.name]
    with tarfile.open(target, "w") as tar:
        _add_path(tar, python)
        info = tarfile.TarInfo("usr/bin/python3")
        info.type, info.linkname = tarfile.SYMTYPE, str(python)
        tar.addfile(info)
        for library in sorted(shared_libraries([python, *extensions])):
            _add_path(tar, library)
        for path in sorted(stdlib.rglob("*")):
            relative = path.relative_to(stdlib)
            skipped = _SKIPPED_STDLIB & set(relative.parts) or relative.parts[0].startswith(
                "config-"
            )
            if skipped or not path.is_file():
                continue
            _add_path(tar, path)
        for path in sorted(p for p in stubs.rglob("*") if p.is_file()):
            tar.add(str(path), arcname=f"{STUBS_DIR.lstrip('/')}/{path.relative_to(stubs)}")
        tmp = tarfile.TarInfo("tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
