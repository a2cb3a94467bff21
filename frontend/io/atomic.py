"""Saves that a kill cannot tear, and loads that see one whole save (the files of ``fj.io``).

**Writing** (:class:`AtomicFiles`). Every file of a save is written to a temporary beside its
target, ``.<name>.fluidjax-<host>-<pid>-<random>.tmp``, created with mode ``0o666`` so that the
umask decides its permissions as for any new file (a replaced file gets the umask's mode too, not
the old file's), then flushed and fsynced. A save of one file renames it over its target: all or
nothing. A save into a *directory* (a checkpoint of one file per variable, a model and its
parameters, a combined checkpoint) also keeps the directory's **manifest**, ``.fluidjax_manifest``:

1. the manifest is written anew, listing every file fluidjax saved in the directory (relative
   name, size, CRC-32, inode and mtime) and, for each file of this save, the temporary that holds
   it; its rename into place is the instant the new save exists;
2. each temporary is renamed over its target, and the directories are fsynced;
3. the manifest is written again without the temporaries.

A kill before step 1's rename leaves every old file as it was (plus temporaries); a kill after
it leaves a directory whose targets are part new, part old, while every new file not yet renamed
still sits in its temporary: a load reads each file from its temporary while the manifest names
one that exists, so it sees the new save whole, and the next save into the directory finishes the
renames first (it *rolls forward*). Saves into one directory take turns on an exclusive ``flock``
of the directory (threads and processes alike). Temporaries that a killed save left are removed
by the next save into their folder; one is only removed when the process named in it is gone.

The manifest is itself a Paddle tensor stream (a ``uint8`` tensor holding JSON): Paddle's
loaders that read every file of a directory as a tensor (``paddle.static.load_program_state``,
``paddle.load`` of a directory) read it as one more tensor instead of failing; loaders that read
the program's variables by name (``load_vars``, ``load_persistables``, ``paddle.static.load``)
never open it.

**Reading** (:func:`read_verified`). A load of files that the manifest lists checks what it
read: the size and CRC-32 of each file against the manifest, and its inode and mtime, which tell
fluidjax's own file from one that another program wrote since (a Paddle save into the same
directory, a copy). The load fails with a :class:`TensorFormatError` when a file fluidjax wrote
has other bytes than it wrote (a damaged file), or when the files it reads mix fluidjax's last
save with files rewritten since by another program: that load would combine two versions. Files
all rewritten by another program load as they are (the manifest is stale, Paddle never updates
it), as do copies (new inodes, the same bytes), and directories without a manifest (written by
Paddle). A load that overlaps a save in another process is retried when the manifest changed
under it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import threading
import zlib
from typing import Any, Callable

import numpy as np

from ...ir.errors import FluidJaxError, TensorFormatError
from ...lowering.signals import deferred_signals, thread_map

__all__ = ["AtomicFiles", "MANIFEST_NAME", "read_verified", "ManifestCheck", "temp_name", "fsync_dir"]

MANIFEST_NAME = ".fluidjax_manifest"
_FORMAT = "fluidjax-manifest"
_VERSION = 1
_HOST = hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]
_TEMP = re.compile(r"^\..*\.fluidjax-(?P<host>[0-9a-f]{6})-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")

# The temporaries this process is writing now (a stray of our own pid is one not in here).
_active: set[str] = set()
_active_lock = threading.Lock()


# -- names, locks, fsync ------------------------------------------------------------------------
def temp_name(path: str, pid: int | None = None) -> str:
    """A fresh temporary's path beside ``path`` (its name says which host and process wrote it)."""
    folder, base = os.path.split(os.path.abspath(path))
    pid = os.getpid() if pid is None else pid
    return os.path.join(folder, f".{base[:100]}.fluidjax-{_HOST}-{pid}-{secrets.token_hex(4)}.tmp")


def _create_temp(path: str) -> tuple[str, int]:
    """Create a temporary for ``path``; mode 0o666 less the umask, as every new file gets."""
    while True:
        tmp = temp_name(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        try:
            with _active_lock:
                _active.add(tmp)
        except BaseException:
            # Ctrl-C just after the name was registered: nobody would forget it, and a live
            # process's temporaries are never removed (a stray until the process ends).
            _forget(tmp)
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return tmp, fd


def _forget(tmp: str) -> None:
    with _active_lock:
        _active.discard(tmp)


def fsync_dir(folder: str) -> None:
    """fsync a directory (its entries: renames into it survive a power loss); best effort."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _lock_dir(folder: str, owner) -> None:
    """Take an exclusive ``flock`` of ``folder`` into ``owner._lock_fd`` (left None where there is
    none: no fcntl, or a filesystem without locks). Released by closing the descriptor.

    The descriptor is stored on ``owner`` inside the same ``try`` that takes the lock: returned to
    the caller to store, a Ctrl-C landing between the return and the store left it open and locked
    for the process's life, and every later save into the folder, from any thread, waited for it
    (the dense soak hung so, its save thread and main thread both in this function)."""
    try:
        import fcntl
    except ImportError:          # pragma: no cover - not POSIX
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        owner._lock_fd = fd      # (no call between the lock and the store: nothing can raise here)
    except OSError:
        os.close(fd)
    except BaseException:
        # Ctrl-C while waiting for the lock, or just as it was taken: a descriptor left open here
        # would hold the lock until the process ends.
        if owner._lock_fd != fd:
            os.close(fd)
        raise


def _alive(pid: int, tmp: str) -> bool:
    """Whether the process that writes ``tmp`` may still be writing it."""
    if pid == os.getpid():
        with _active_lock:
            return tmp in _active
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:              # EPERM: alive, another user's
        return True
    return True


def _remove_strays(folder: str, keep: set[str]) -> None:
    """Remove the temporaries of saves that died in ``folder`` (this host's, whose process is
    gone), except those in ``keep`` (a committed save's files not renamed yet)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _TEMP.match(name)
        if m is None or m["host"] != _HOST:
            continue
        path = os.path.join(folder, name)
        if path in keep or _alive(int(m["pid"]), path):
            continue
        try:
            os.unlink(path)
        except OSError:
            pass


def _referenced_temps(folder: str) -> set[str]:
    """The temporaries that the manifests of ``folder`` and its ancestors name (a committed
    save of another directory may keep a file here until its renames are done)."""
    found: set[str] = set()
    current = os.path.abspath(folder)
    while True:
        if os.path.exists(os.path.join(current, MANIFEST_NAME)):
            try:
                _, entries = _read_manifest(current)
            except TensorFormatError:
                entries = {}
            for entry in (entries or {}).values():
                if "pending" in entry:
                    found.add(os.path.normpath(os.path.join(current, entry["pending"])))
        parent = os.path.dirname(current)
        if parent == current:
            return found
        current = parent


# -- the manifest ---------------------------------------------------------------------------------
def _rel(root: str, path: str) -> str:
    return os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")


def _read_manifest(root: str) -> tuple[bytes | None, dict | None]:
    """(raw bytes, entries) of ``root``'s manifest; (None, None) when there is none."""
    from .tensor_stream import TensorReader

    path = os.path.join(root, MANIFEST_NAME)
    try:
        f = open(path, "rb")
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    with f:
        raw = f.read()
    try:
        import io

        reader = TensorReader(io.BytesIO(raw), path, len(raw))
        array, _ = reader.read_tensor(MANIFEST_NAME)
        doc = json.loads(bytes(np.asarray(array, np.uint8)).decode("utf-8"))
        if doc.get("format") != _FORMAT or not isinstance(doc.get("files"), dict):
            raise ValueError("not a fluidjax manifest")
        if doc.get("version") != _VERSION:
            raise ValueError(f"manifest version {doc.get('version')!r}, this fluidjax reads {_VERSION}")
        return raw, doc["files"]
    except (FluidJaxError, ValueError, TypeError, AttributeError) as exc:
        raise TensorFormatError(f"{path}: not a readable fluidjax manifest ({exc}); delete it to load the "
                                "directory's files unverified", path=path) from None


def _write_manifest(root: str, entries: dict) -> None:
    """Replace ``root``'s manifest (temporary, fsync, rename, fsync the directory)."""
    from .tensor_stream import write_tensor

    doc = {"format": _FORMAT, "version": _VERSION, "files": dict(sorted(entries.items()))}
    data = np.frombuffer(json.dumps(doc, separators=(",", ":")).encode("utf-8"), np.uint8)
    path = os.path.join(root, MANIFEST_NAME)
    tmp, fd = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            write_tensor(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        _forget(tmp)
    fsync_dir(root)


def _roll_forward(root: str) -> None:
    """Finish the renames of a committed save that was interrupted (under the directory's lock)."""
    try:
        _, entries = _read_manifest(root)
    except TensorFormatError:
        return                    # a damaged manifest: the save replaces it
    if not entries or not any("pending" in e for e in entries.values()):
        return
    folders = set()
    for rel, entry in entries.items():
        pending = entry.pop("pending", None)
        if pending is None:
            continue
        tmp, target = os.path.join(root, pending), os.path.join(root, rel)
        try:
            os.replace(tmp, target)
        except FileNotFoundError:
            pass                  # renamed before the interruption
        folders.add(os.path.dirname(target))
    for folder in folders:
        fsync_dir(folder)
    _write_manifest(root, entries)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_files(paths: list[str]) -> None:
    """fsync many files, several at a time: concurrent fsyncs share the filesystem's journal
    commits (2,000 small files: 0.9-1.9 s instead of 4-8 s one after the other on the project's
    machine)."""
    if len(paths) <= 2:
        for path in paths:
            _fsync_file(path)
        return
    thread_map(_fsync_file, paths, 32)     # interruptible, never hangs (lowering/signals.py)


class _HashingWriter:
    """A file's ``write`` that counts and checksums what goes through it."""

    def __init__(self, f) -> None:
        self._f = f
        self.size = 0
        self.crc = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        self.size += view.nbytes
        return self._f.write(view)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


# -- writing --------------------------------------------------------------------------------------
class AtomicFiles:
    """Files written to temporaries in their targets' folders and renamed over the targets only
    when all of them are complete and fsynced: a kill before :meth:`commit` leaves the previous
    files as they were. With :meth:`set_root` the files are one save into that directory, kept
    whole by its manifest (see the module's docstring); without, each file stands alone.

    >>> # files = AtomicFiles(); files.set_root("ckpt")
    >>> # try:
    >>> #     files.write("ckpt/w", lambda f: f.write(data)); files.commit()
    >>> # finally:
    >>> #     files.abort()
    """

    def __init__(self) -> None:
        self._pending: list[dict] = []
        self._root: str | None = None
        self._lock_fd: int | None = None
        self._locked = False
        self._committed = False
        self._cleaned: set[str] = set()

    def set_root(self, root: str) -> None:
        """Make the files one save into directory ``root`` (before the first :meth:`write`)."""
        if self._locked or self._pending:
            raise RuntimeError("AtomicFiles.set_root must come before the first write")
        self._root = os.path.abspath(root)

    def _start(self) -> None:
        """Take the directory's lock, finish a committed save a kill interrupted, drop strays."""
        self._locked = True
        if self._root is None:
            return
        os.makedirs(self._root, exist_ok=True)
        _lock_dir(self._root, self)       # sets self._lock_fd (closed by _finish)
        _roll_forward(self._root)

    def _clean(self, folder: str) -> None:
        if folder not in self._cleaned:
            self._cleaned.add(folder)
            _remove_strays(folder, _referenced_temps(folder))

    def write(self, path: str, fill: Callable[[Any], None]) -> None:
        """Write ``path``'s new content with ``fill(file)`` into a temporary file."""
        if not self._locked:
            self._start()
        path = os.path.abspath(path)
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        if os.path.isdir(path):
            raise IsADirectoryError(f"cannot save to {path}: it is a directory")
        self._clean(folder)
        # The temporary joins the save's list in the same uninterruptible step that creates it:
        # from then on abort() (which every caller runs in a ``finally``) closes, removes and
        # forgets it, whichever line a Ctrl-C lands on. (Registered first and listed a few
        # bytecodes later, a Ctrl-C in between left a tracked temporary for the process's life.)
        with deferred_signals():
            tmp, fd = _create_temp(path)
            f = os.fdopen(fd, "wb")
            item = {"tmp": tmp, "path": path, "file": f}
            self._pending.append(item)
        try:
            with f:
                out = _HashingWriter(f) if self._root is not None else f
                fill(out)
                f.flush()
                if self._root is None:
                    os.fsync(f.fileno())       # a save into a directory fsyncs all its files at once
                st = os.fstat(f.fileno())
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            self._pending.remove(item)
            _forget(tmp)
            raise
        item.update(ino=st.st_ino, mtime_ns=st.st_mtime_ns)
        if self._root is not None:
            item.update(size=out.size, crc32=out.crc)

    def commit(self) -> None:
        """Publish the files: one rename each, after the manifest's when there is a root."""
        try:
            if self._root is not None and self._pending:
                _fsync_files([item["tmp"] for item in self._pending])   # durable before the commit
                self._clean(self._root)
                try:
                    _, entries = _read_manifest(self._root)
                except TensorFormatError:
                    entries = None                       # damaged: this save replaces it
                entries = dict(entries or {})
                for item in self._pending:
                    entries[_rel(self._root, item["path"])] = {
                        "size": item["size"], "crc32": item["crc32"], "ino": item["ino"],
                        "mtime_ns": item["mtime_ns"], "pending": _rel(self._root, item["tmp"])}
            # From the manifest's rename to the last one a Ctrl-C waits (as a run's commit does):
            # one between that rename and ``_committed`` made abort() delete the temporaries the
            # new manifest names, and one later left the targets part old until the next save.
            with deferred_signals():
                if self._root is not None and self._pending:
                    _write_manifest(self._root, entries)   # the instant the new save exists
                    self._committed = True
                folders = set()
                for item in self._pending:
                    os.replace(item["tmp"], item["path"])
                    folders.add(os.path.dirname(item["path"]))
                for folder in folders:
                    fsync_dir(folder)
                if self._committed:
                    for entry in entries.values():
                        entry.pop("pending", None)
                    _write_manifest(self._root, entries)
        finally:
            self._finish()

    def abort(self) -> None:
        """Remove the temporaries of a save that did not commit (the targets were never touched);
        a committed save's temporaries are its content until renamed, and stay."""
        try:
            if not self._committed:
                for item in self._pending:
                    item["file"].close()           # open where a Ctrl-C stopped its write
                    try:
                        os.unlink(item["tmp"])
                    except OSError:
                        pass
        finally:
            self._finish()

    def _finish(self) -> None:
        # Uninterruptible: a Ctrl-C here left the directory's lock held, or temporaries tracked as
        # "being written" for the process's life (so no later save would ever remove them).
        with deferred_signals():
            fd = self._lock_fd
            if fd is not None:
                self._lock_fd = None
                os.close(fd)
            for item in self._pending:
                item["file"].close()
            tmps = [item["tmp"] for item in self._pending]
            with _active_lock:
                _active.difference_update(tmps)
            self._pending = []


# -- reading --------------------------------------------------------------------------------------
class _HashingReader:
    """A binary file whose reads are counted and checksummed (``seek(0)`` starts again)."""

    def __init__(self, f) -> None:
        self._f = f
        self.size = 0
        self.crc = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        return data

    def readinto(self, buffer) -> int:
        got = self._f.readinto(buffer)
        view = memoryview(buffer).cast("B")[:got]
        self.crc = zlib.crc32(view, self.crc)
        self.size += got
        return got

    def seek(self, offset: int, whence: int = 0) -> int:
        if (offset, whence) != (0, 0):
            raise ValueError("a checked file can only seek back to its start")
        self.size, self.crc = 0, 0
        return self._f.seek(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


class ManifestCheck:
    """The files one load reads from ``root``, checked against the directory's manifest."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.manifest = os.path.join(self.root, MANIFEST_NAME)
        self.raw, self.entries = _read_manifest(self.root)
        self._opened: list[tuple[str, dict, _HashingReader, os.stat_result]] = []

    def open(self, path: str):
        """``path`` opened for reading (from its temporary while a committed save has not renamed
        it yet); the read is checked by :meth:`finish`. Raises what ``open`` raises."""
        entry = None if self.entries is None else self.entries.get(_rel(self.root, path))
        if entry is None:
            return open(path, "rb")
        f = None
        if "pending" in entry:
            try:
                f = open(os.path.join(self.root, entry["pending"]), "rb")
            except FileNotFoundError:
                f = None                                 # renamed already: the target is the new file
        if f is None:
            f = open(path, "rb")
        checked = _HashingReader(f)
        self._opened.append((path, entry, checked, os.fstat(f.fileno())))
        return checked

    def changed(self) -> bool:
        """Whether the manifest is another one than when this check began (a save committed)."""
        try:
            raw, _ = _read_manifest(self.root)
        except TensorFormatError:
            return True
        return raw != self.raw

    def finish(self) -> None:
        """Raise if a file read has other bytes than fluidjax wrote, or if the files mix
        fluidjax's last save with files another program rewrote since."""
        ours, rewritten = [], []
        for path, entry, checked, st in self._opened:
            same_bytes = checked.size == entry["size"] == st.st_size and checked.crc == entry["crc32"]
            same_file = (st.st_ino, st.st_mtime_ns) == (entry["ino"], entry["mtime_ns"])
            if same_file and not same_bytes:
                raise TensorFormatError(
                    f"{path}: its size or checksum (CRC-32) is not what the manifest {self.manifest} recorded "
                    f"when fluidjax saved it ({checked.size} bytes read, {entry['size']} saved): the file changed "
                    "after it was saved (a damaged disk or copy, or another program that rewrote it in place within "
                    "the same instant)", path=path)
            if same_file:
                ours.append(path)
            elif not same_bytes:
                rewritten.append(path)
        if ours and rewritten:
            names = lambda paths: ", ".join(_rel(self.root, p) for p in paths[:4]) + (  # noqa: E731
                f" and {len(paths) - 4} more" if len(paths) > 4 else "")
            raise TensorFormatError(
                f"{self.root}: the files of this load come from different saves: {names(ours)} are as fluidjax "
                f"saved them (per {self.manifest}), but {names(rewritten)} were rewritten since by another program "
                "(a Paddle save into the same directory, or one interrupted midway); loading them together would "
                f"mix two versions. Save again, or delete {self.manifest} to load the files as they are.",
                path=rewritten[0])


def read_verified(root: str, read: Callable[[ManifestCheck], Any], attempts: int = 4) -> Any:
    """``read(check)`` — which opens every file through ``check.open`` — checked against
    ``root``'s manifest; retried while a save in another process commits under it."""
    for attempt in range(attempts):
        check = ManifestCheck(root)
        try:
            result = read(check)
            check.finish()
            return result
        except (FluidJaxError, OSError):
            if attempt + 1 < attempts and check.entries is not None and check.changed():
                continue
            raise
    raise AssertionError("unreachable")  # pragma: no cover
