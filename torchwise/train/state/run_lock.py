"""One writer per run folder: the lock a command holds on its run folder while it writes there.

Without it, two `torchwise train` on one --out (or two `Trainer(out_dir=X).fit()` in two processes) both
run to the end: metrics.csv gets both runs' rows interleaved and the weights are whichever wrote last.

The lock is an OS file lock (fcntl.flock, LOCK_EX | LOCK_NB) on RUN/.torchwise.lock:
- the kernel releases it when its process ends in any way (kill -9 included), so a crash never leaves
  a folder locked: the file left behind is only a note, ignored while nobody holds its lock;
- it belongs to the open file, not to the process: a second lock object in the same process is refused
  as well (two Trainers in two threads on one out_dir);
- the file holds who took it (JSON: pid, host, boot id, since, command), so a refusal names the holder.
Released, it deletes its file while still holding it (a finished run leaves none behind); whoever got
the lock of a file that was deleted or replaced meanwhile sees that (the path's inode is no longer the
one it locked) and takes the new file instead, so two writers never hold two different files.

Shared filesystems (a run folder on NFS seen by several machines), decided from the note:
- a note written under this same kernel (same boot id, so also another container on this machine) is
  stale whenever the lock is free: flock is authoritative there;
- a note from this host's earlier boot is stale (that process ended with the reboot);
- a note from another machine is NOT taken over even when flock says free: flock may be local to each
  machine on such a filesystem (NFS mounted with nolock, some cluster filesystems), and a pid cannot be
  looked up across machines. The command is refused with the holder and the fix (delete the file once
  that run has ended). A manual `rm` after a crash on another machine costs a minute; a second writer
  costs the run, which is what this lock exists to prevent.
- where the filesystem refuses flock itself (ENOLCK, EOPNOTSUPP), the note decides alone: a holder
  under this kernel whose pid is alive holds the folder. Two commands started in the same instant on
  such a filesystem are not told apart (nothing atomic is left to lean on); the note still stops the
  common case, a second command started later.

`claim(run_dir)` is what commands use: the lock for the calling context, or nothing new when that context
holds the folder's lock already (`torchwise train` holds it around its own Trainer, whose fit() claims
it again). Contexts are per thread, so another thread's claim takes a lock of its own (and is refused).
"""
from __future__ import annotations

import contextvars
import errno
import json
import os
import shlex
import socket
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from torchwise import files
from torchwise.errors import TorchwiseError

LOCK_FILE = ".torchwise.lock"
# flock refused by the filesystem itself (not "held by someone"): the note alone decides then
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
_HELD: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("torchwise_run_locks", default=frozenset())


class RunFolderBusy(TorchwiseError):
    """Another writer holds the run folder's lock."""


class RunLock:
    """The lock file of one run folder, held through one open file description (acquire / release)."""

    def __init__(self, run_dir: str | Path, command: str | None = None):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.record = holder_record(command)
        self.fd: int | None = None
        self.created: list[Path] = []  # folders made to hold the lock: removed again on release while empty

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self) -> RunLock:
        """Take the lock, or raise RunFolderBusy (nothing on disk changed then)."""
        if self.fd is not None:
            return self
        try:
            for _ in range(100):  # only a holder deleting its file at this very moment makes it go round again
                self._make_folder()
                if self._try_once():
                    return self
            raise TorchwiseError("The run folder's lock file kept changing while it was taken.",
                                 values={"lock file": str(self.path)},
                                 fix="make sure nothing else deletes files in the run folder, and run again")
        except BaseException:
            self._remove_created()
            raise

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            if _same_file(fd, self.path):  # still ours: deleted while locked (see the module docstring)
                os.unlink(self.path)
        except OSError:
            pass  # a lock file that cannot be deleted is only a stale note: the lock itself ends below
        finally:
            _unlock(fd)
            os.close(fd)
            self._remove_created()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _try_once(self) -> bool:
        """True when this object now holds the lock; False when the file changed under it (try again)."""
        fd = _open_lock_file(self.path)
        if fd is None:
            return False
        try:
            locked = _flock(fd)
            if locked is False:
                raise busy_error(self.run_dir, read_note(fd), self.path)
            if not _same_file(fd, self.path):
                os.close(fd)
                return False
            refusal = stale_note_refusal(read_note(fd), self.run_dir, self.path, flock_works=locked is True)
            if refusal is not None:
                raise refusal
            _write_note(fd, self.record)
        except BaseException:
            _unlock(fd)
            os.close(fd)
            raise
        self.fd = fd
        return True

    def _make_folder(self) -> None:
        """The run folder, made if missing (a new run): each folder made is remembered, to be removed on release."""
        missing, folder = [], self.run_dir.absolute()
        while not folder.exists() and folder != folder.parent:
            missing.append(folder)
            folder = folder.parent
        for folder in reversed(missing):
            try:
                folder.mkdir()
                self.created.append(folder)
            except FileExistsError:
                pass
            except OSError as exc:
                raise TorchwiseError("The run folder cannot be created.", values={"folder": str(folder),
                                     "error": exc.strerror}, fix="choose a run folder that can be written") from None

    def _remove_created(self) -> None:
        """A refused or failed command leaves no folder it made (rmdir refuses a folder with anything in it)."""
        for folder in reversed(self.created):
            try:
                folder.rmdir()
            except OSError:
                break
        self.created = []


class Claim:
    """A context's hold on a run folder: the lock it took, or none when the context held it already."""

    def __init__(self, lock: RunLock | None, key: str):
        self.lock, self.key = lock, key

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None
            _HELD.set(_HELD.get() - {self.key})

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim(run_dir: str | Path, command: str | None = None) -> Claim:
    """The run folder's lock for the calling context (a Claim to release, or use with `with`); raises
    RunFolderBusy while another writer holds it. Nested in a claim of the same folder: takes nothing."""
    key = os.path.realpath(run_dir)
    if key in _HELD.get():
        return Claim(None, key)
    lock = RunLock(run_dir, command).acquire()
    try:  # under the lock, before the command writes anything: no link in the folder leads out of it
        files.refuse_links_out(Path(run_dir))
    except BaseException:
        lock.release()
        raise
    _HELD.set(_HELD.get() | {key})
    return Claim(lock, key)


def claim_if_inside(run_dir: str | Path | None, target: str | Path) -> Claim:
    """The run folder's claim when `target` (a file or folder a command writes) lies inside it, else nothing."""
    if run_dir is None:
        return Claim(None, "")
    # inside by its name (RUN/eval.json that is a link out of RUN is still written in RUN: the claim then
    # refuses the link) or where it resolves (a path given through another name of the folder)
    inside = Path(os.path.abspath(target)).is_relative_to(os.path.abspath(run_dir)) or \
        Path(os.path.realpath(target)).is_relative_to(os.path.realpath(run_dir))
    return claim(run_dir) if inside else Claim(None, "")


# ----------------------------------------------------------------------------- the note and the refusals


def holder_record(command: str | None = None) -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "boot": _boot_id(),
            "since": datetime.now().astimezone().isoformat(timespec="seconds"), "command": command or this_command()}


def this_command() -> str:
    """This process's command line, as the user typed it where it can be told (`torchwise train ...`)."""
    argv = list(sys.argv)
    if not argv or argv == [""]:
        return "python (interactive)"
    if argv[0].endswith(os.path.join("torchwise", "__main__.py")) or os.path.basename(argv[0]) == "torchwise":
        argv[0] = "torchwise"
    else:
        argv.insert(0, os.path.basename(sys.executable))
    return shlex.join(argv)


def read_note(fd: int) -> dict[str, Any]:
    """The holder's note ({} when empty, being written, or not torchwise's)."""
    try:
        note = json.loads(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        return {}
    return note if isinstance(note, dict) else {}


def busy_error(run_dir: Path, note: dict[str, Any], path: Path) -> RunFolderBusy:
    pid, host = note.get("pid", "unknown"), note.get("host", "unknown")
    here = pid == os.getpid() and _same_kernel(note)
    values = {"run folder": str(run_dir), "holder pid": f"{pid} (this process)" if here else pid, "host": host,
              "since": note.get("since", "unknown"), "its command": note.get("command", "unknown"),
              "lock file": str(path)}
    fix = ("release the other lock or Trainer of this folder in this process first, or give this run another "
           "--out (out_dir=)" if here else
           f"wait for pid {pid} to finish, or give this run another --out (out_dir=); if pid {pid} is stuck, end "
           f"it (kill {pid} on {host}) and continue its run with --resume (resume=True)")
    return RunFolderBusy("Another torchwise run is writing to this run folder (it holds the folder's lock).",
                         values=values, fix=fix)


def stale_note_refusal(note: dict[str, Any], run_dir: Path, path: Path, *, flock_works: bool) -> TorchwiseError | None:
    """Why a note left in the lock file still refuses this command (None: the note is stale, take over).
    The rules, and why, are in the module docstring."""
    if not note or not isinstance(note.get("pid"), int):
        return None
    if _same_kernel(note):
        return busy_error(run_dir, note, path) if not flock_works and _alive(note["pid"]) else None
    if note.get("host") == socket.gethostname():
        return None  # this machine, before its last restart: that process is gone
    return RunFolderBusy(
        "The run folder's lock file names a run on another machine, and from here it cannot be told whether it "
        "still runs (file locks may not reach across machines on a shared filesystem).",
        values={"run folder": str(run_dir), "holder pid": note["pid"], "host": note.get("host", "unknown"),
                "since": note.get("since", "unknown"), "its command": note.get("command", "unknown"),
                "lock file": str(path)},
        fix=f"if pid {note['pid']} on {note.get('host')} has ended (check there: ps -p {note['pid']}), delete "
            f"{path} and run again; else wait for it, or give this run another --out (out_dir=)")


# ----------------------------------------------------------------------------- the OS calls


def _open_lock_file(path: Path) -> int | None:
    """The lock file, opened (created if missing) without following a symbolic link; None when its folder
    was removed meanwhile (by a refused command that had made it)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        return None
    except OSError as exc:
        what = ("The run folder's lock file is a symbolic link (torchwise does not follow it)."
                if exc.errno == errno.ELOOP else "The run folder's lock file cannot be opened.")
        raise TorchwiseError(what, values={"lock file": str(path), "error": exc.strerror},
                             fix=f"remove {path} (torchwise keeps its lock there), or choose another run folder") from None


def _flock(fd: int) -> bool | None:
    """True: locked; False: another open file holds it; None: this filesystem does not do flock."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        if exc.errno in _NO_FLOCK:
            return None
        raise
    return True


def _unlock(fd: int) -> None:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_UN)  # explicit: a forked child (a loader worker) may still share the file
    except OSError:
        pass


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _write_note(fd: int, record: dict[str, Any]) -> None:
    data = json.dumps(record, indent=1).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)  # another machine reads the note through the shared filesystem, not this page cache


def _boot_id() -> str:
    """This kernel's boot id (shared by the containers on one machine, new at each restart); '' where none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _same_kernel(note: dict[str, Any]) -> bool:
    boot = _boot_id()
    if boot and note.get("boot"):
        return note["boot"] == boot
    return note.get("host") == socket.gethostname()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OSError:
        return False
    return True
