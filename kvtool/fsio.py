"""Safe file I/O: inputs read only from regular files and within a size limit; every
file kvtool writes replaced atomically, never half-written.

Reading opens without blocking (a FIFO must not hang the run) and refuses anything
that is not a regular file, except ``-`` for stdin. Every file a run reads, and every
file it is pointed at (:func:`note_input`), is remembered by device and inode, so no
write of that run (a report, a launch file, a cache entry) replaces it, whatever name,
symbolic link or hard link the write was given; only ``--fix`` rewrites an input, and
only one it audited (``rewrites_input``). Writing goes to a temporary file
in the target's directory, is flushed to disk and renamed over the target, so a full
disk, a file-size limit or a crash leaves the old file whole. The target's mode and
ownership carry over. When the caller says what the file held when it was read, the
target is locked and read again just before the rename, and a change made meanwhile
(another editor, a second ``kvtool audit --fix``) aborts that file: nothing is lost.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from kvtool import limits
from kvtool.errors import KvtoolError

STDIN = "-"
# Inputs open without blocking (a FIFO must not hang the run), never as a controlling tty.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class ChangedOnDisk(KvtoolError):
    """The file changed between kvtool's read and its write; the write was abandoned."""


class WouldOverwriteInput(KvtoolError):
    """A write would replace a file this run read or was pointed at."""


# (st_dev, st_ino, st_ctime_ns) -> the name the run read it by: every input of this run.
# The change time tells a file apart from a later one that reuses a deleted file's inode
# (a library caller that never starts a new run: tests, one process reading and writing).
_INPUTS: dict[tuple[int, int, int], str] = {}


def _identity(status: os.stat_result) -> tuple[int, int, int]:
    return (status.st_dev, status.st_ino, status.st_ctime_ns)


def forget_inputs() -> None:
    """Start a run: nothing read yet (the CLI calls this before each command)."""
    _INPUTS.clear()


def note_input(path: Path | str) -> None:
    """Remember ``path`` (through any symbolic link) as an input of this run: a file
    read by other means than :func:`read_input_bytes` (an archive, a TOML file), or
    named by an option before it is read. A path that does not exist is ignored."""
    if str(path) == STDIN:
        return
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return
    _INPUTS.setdefault(_identity(status), str(path))


def refuse_overwriting_any_input(output: Path | str, flag: str) -> None:
    """Raise ``WouldOverwriteInput`` when ``output`` (through links) is an input of this
    run; ``flag`` names the option that chose ``output``."""
    try:
        status = os.stat(output)
    except (OSError, ValueError):
        return  # no such file yet: nothing to lose
    read_as = _INPUTS.get(_identity(status))
    if read_as is not None:
        same = "" if read_as == str(output) else f" (the same file as {read_as})"
        raise WouldOverwriteInput(
            f"{flag} {output}: is an input of this run{same}; it would be overwritten, "
            "so nothing is written"
        )


def describe_os_error(error: OSError, path: object = None) -> str:
    """``PATH: reason`` for an ``OSError``, one line, whatever its errno."""
    where = path if path is not None else (error.filename or "<file>")
    reason = error.strerror or error.__class__.__name__
    return f"{where}: {reason}"


def read_input_bytes(
    path: Path | str, *, limit: limits.Limit = limits.INPUT_BYTES, cap: int | None = None
) -> bytes:
    """The bytes of a regular file (or stdin for ``-``), at most ``limit`` of them.

    ``cap`` is ``limit.count`` when the caller has it already: a directory walk reads the
    limit's environment variable once, not once per file.
    """
    if cap is None:
        cap = limit.count
    if str(path) == STDIN:
        stream = getattr(sys.stdin, "buffer", None)  # a text-only stdin (tests) has no bytes
        data = stream.read(cap + 1) if stream is not None else sys.stdin.read(cap + 1).encode()
        if len(data) > cap:
            raise limits.LimitExceeded(limit.message("<stdin>"))
        return data
    try:
        descriptor = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise KvtoolError(f"{path}: no such file or directory") from None
    except OSError as error:
        raise KvtoolError(f"cannot read {describe_os_error(error, path)}") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise KvtoolError(
                f"{path}: not a regular file ({_kind(status.st_mode)}); give a file or -"
            )
        _INPUTS.setdefault(_identity(status), str(path))
        data = _read_regular(descriptor, status.st_size, cap)
    except OSError as error:
        raise KvtoolError(f"cannot read {describe_os_error(error, path)}") from None
    finally:
        os.close(descriptor)
    if len(data) > cap:
        raise limits.LimitExceeded(limit.message(str(path)))
    return data


def _read_regular(descriptor: int, size: int, cap: int) -> bytes:
    """At most ``cap + 1`` bytes of a regular file whose ``fstat`` size is ``size``.

    One read of the size (plus one byte, to see the file grew) is the whole file in
    the common case; asking for the cap instead would allocate it for every file of a
    directory walk. A file that grew is read on up to the cap, a short read to its end.
    """
    want = min(size, cap) + 1
    data = os.read(descriptor, want)
    if len(data) == size:
        return data
    chunks = [data]
    total = len(data)
    while total <= cap:
        chunk = os.read(descriptor, cap + 1 - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def decode_text(data: bytes, name: object) -> str:
    """UTF-8 text with a clear error naming the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise KvtoolError(
            f"{name}: not UTF-8 text (byte {error.start}: {data[error.start:error.start + 1]!r})"
        ) from None


BOM = "\ufeff"


def reader_text(raw: str) -> str:
    """What the input readers parse: a leading BOM dropped and CRLF read as LF (a lone CR
    is data, as bash reads it). ``--fix`` maps its edits back through the same rule."""
    return raw.removeprefix(BOM).replace("\r\n", "\n")


def read_input_text(path: Path | str, *, limit: limits.Limit = limits.INPUT_BYTES) -> str:
    """A regular file's UTF-8 text as the readers parse it (see ``reader_text``)."""
    return reader_text(decode_text(read_input_bytes(path, limit=limit), path))


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def refuse_overwriting_inputs(output: Path, inputs: Iterable[Path | str], flag: str) -> None:
    """Raise ``WouldOverwriteInput`` when writing ``output`` would replace one of
    ``inputs`` (named on the command line, checked before they are read). Every write
    checks all that the run has read by then (:func:`atomic_write`)."""
    try:
        target = os.stat(output)
    except (OSError, ValueError):
        return
    for candidate in inputs:
        if str(candidate) == STDIN:
            continue
        try:
            status = os.stat(candidate)
        except (OSError, ValueError):
            continue
        if (status.st_dev, status.st_ino) == (target.st_dev, target.st_ino):
            same = "" if str(candidate) == str(output) else f" (the same file as {candidate})"
            raise WouldOverwriteInput(
                f"{flag} {output}: is an input of this run{same}; it would be overwritten, "
                "so nothing is written"
            )


def atomic_write(
    path: Path,
    data: bytes,
    *,
    expected: bytes | None = None,
    mode: int | None = None,
    follow_symlinks: bool = True,
    flag: str = "-o",
    own_file: bool = False,
) -> None:
    """Replace ``path`` with ``data`` all at once, or leave it as it was and raise.

    ``expected``: the bytes ``path`` held when read (``--fix`` rewriting the file it
    audited); a change since then raises ``ChangedOnDisk``. Without it, ``path`` must be
    no input of this run (``WouldOverwriteInput``, naming ``flag``), unless it is one of
    kvtool's ``own_file`` (a cache entry it read and now renews). ``mode``: the mode
    of a new file (an existing one keeps its own, setuid and setgid included, or the
    write is refused). A symlink is followed (the link stays, its target is replaced)
    unless ``follow_symlinks`` is false, when it is refused. A file with other hard
    links is refused: renaming over it would split the links.
    """
    if expected is None and not own_file:
        refuse_overwriting_any_input(path, flag)
    target = _write_target(path, follow_symlinks)
    existing = _lstat_or_none(target)
    if existing is not None:
        if not stat.S_ISREG(existing.st_mode):
            kind = _kind(existing.st_mode)
            raise KvtoolError(f"{path}: not a regular file ({kind}); not written")
        if existing.st_nlink > 1:
            raise KvtoolError(
                f"{path}: has {existing.st_nlink} hard links; replacing it would split them, "
                "so it is left alone"
            )
        # Mode bits too: root may write anything, but a read-only file says "leave me be".
        if not existing.st_mode & 0o222 or not os.access(target, os.W_OK):
            raise KvtoolError(f"{path}: is read-only; not written")
    elif expected is not None:
        raise ChangedOnDisk(f"{path}: was removed since kvtool read it; not written")
    directory = target.parent
    import tempfile  # only a run that writes pays for it (a cold audit never does)

    try:
        descriptor, name = tempfile.mkstemp(
            dir=directory, prefix=f".{target.name[:100]}.", suffix=".kvtool-tmp"
        )
    except OSError as error:
        raise KvtoolError(f"cannot write {describe_os_error(error, path)}") from None
    temporary = Path(name)
    try:
        with open(descriptor, "wb", closefd=True) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(descriptor)
            _copy_metadata(descriptor, existing, mode, path)
        with _locked_original(target, expected, path):
            os.replace(temporary, target)
        _sync_directory(directory)
        if expected is not None:
            note_input(target)  # still an input: a report of this run must not replace it
    except OSError as error:
        _remove_quietly(temporary)
        reason = describe_os_error(error, path)
        raise KvtoolError(f"cannot write {reason}; the file is left as it was") from None
    except BaseException:
        _remove_quietly(temporary)
        raise


def atomic_write_text(
    path: Path,
    text: str,
    *,
    mode: int | None = None,
    follow_symlinks: bool = True,
    own_file: bool = False,
    flag: str = "-o",
) -> None:
    """``atomic_write`` of ``text`` as UTF-8."""
    data = text.encode("utf-8")
    atomic_write(
        path, data, mode=mode, follow_symlinks=follow_symlinks, own_file=own_file, flag=flag
    )


def _write_target(path: Path, follow_symlinks: bool) -> Path:
    if not path.is_symlink():
        return path
    if not follow_symlinks:
        raise KvtoolError(f"{path}: is a symbolic link; not written through it")
    try:
        return Path(os.path.realpath(path, strict=True))
    except OSError as error:
        raise KvtoolError(f"{describe_os_error(error, path)} (symbolic link)") from None


def _lstat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise KvtoolError(f"cannot write {describe_os_error(error, path)}") from None


def _copy_metadata(
    descriptor: int, existing: os.stat_result | None, mode: int | None, shown: Path
) -> None:
    """The new file's owner and mode as the old one's, or ``KvtoolError``.

    Ownership first: changing it clears setuid and setgid, so the mode is set after it,
    and read back: a bit the kernel did not keep (setgid for a group kvtool's user is
    not in) refuses the write instead of replacing the file with a weaker one.
    """
    if existing is None:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(descriptor, (0o666 if mode is None else mode) & ~umask)
        return
    wanted = stat.S_IMODE(existing.st_mode)
    try:
        os.fchown(descriptor, existing.st_uid, existing.st_gid)
    except PermissionError:
        now = os.fstat(descriptor)  # a filesystem that owns every file alike (vfat) is fine
        if (now.st_uid, now.st_gid) != (existing.st_uid, existing.st_gid):
            raise KvtoolError(
                f"{shown}: belongs to uid {existing.st_uid} gid {existing.st_gid}, which "
                "kvtool's user cannot give a new file; not written"
            ) from None
    os.fchmod(descriptor, wanted)
    kept = stat.S_IMODE(os.fstat(descriptor).st_mode)
    if kept != wanted:
        raise KvtoolError(
            f"{shown}: its mode {wanted:04o} cannot be kept (the new file would be "
            f"{kept:04o}); not written"
        )


@contextlib.contextmanager
def _locked_original(target: Path, expected: bytes | None, shown: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file about to be replaced and check it is unchanged.

    A second writer locking the same file waits here; once it has the lock, the path
    names the first writer's new file, so the inode check below tells it apart.
    """
    if expected is None:
        yield
        return
    try:
        descriptor = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ChangedOnDisk(f"{shown}: was removed since kvtool read it; not written") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        held = os.fstat(descriptor)
        current = os.stat(target)
        now = _read_all(descriptor)
        if (held.st_dev, held.st_ino) != (current.st_dev, current.st_ino) or now != expected:
            raise ChangedOnDisk(
                f"{shown}: changed on disk since kvtool read it; not written "
                "(run again to fix the new version)"
            )
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def _read_all(descriptor: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(descriptor, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _sync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()

