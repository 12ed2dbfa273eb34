"""Writing files so that a crash never leaves half of one: write beside, fsync, rename over.

The one owner of "how the package writes a file it must not lose" (checkpoints, weights, the run's
JSON and YAML, cached statistics): every layer above may use it, so it imports nothing of the package
but the errors. A failed write says which file, the system's reason, the free space and the file size
limit, instead of a traceback from inside a writer.

It is also the one owner of "a file written in a run folder stays in it": a writer that names the run
folder (`root=`) never follows a symbolic link out of it. An atomic write renames its temporary over the
name (replacing a link there, never writing what it points to) and creates that temporary under a fresh
random name with O_EXCL (a link placed beforehand cannot be its name); an append opens with O_NOFOLLOW;
the folders between the run folder and the file are made one by one, each checked. A link that leads out
is refused with an error naming it: `refuse_links_out` says so for the whole folder when a command takes
it (train/state/run_lock.py's claim), before anything is written; the checks at each write are the same
rule for a link placed while the run runs. The run folder itself may be a link (the user's choice of disk):
"out of it" means out of where it resolves to.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

from torchwise.errors import TorchwiseError


def fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def umask() -> int:
    try:  # Linux says it without changing it
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def usual_mode(path: Path) -> None:
    """The mode a plain open() would give: safetensors writes its file 0600 whatever the umask says,
    which hides weights from the rest of a team sharing the run directory."""
    os.chmod(path, 0o666 & ~umask())


def space_and_limit(folder: Path) -> dict[str, str]:
    """Free space where `folder` is, and this process' file size limit when it has one."""
    found = {}
    with contextlib.suppress(OSError):
        found["free disk space"] = f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB"
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY:
            found["file size limit"] = f"{soft} bytes (ulimit -f)"
    return found


def write_error(what: str, path: Path, exc: BaseException, fix: str, **values: Any) -> TorchwiseError:
    """A failed write (disk full, file too large, read-only disk, a file where a folder belongs) as an
    error that names the file and the system's reason instead of a traceback from inside a writer."""
    reason = f"{exc.strerror} (errno {exc.errno})" if isinstance(exc, OSError) and exc.strerror else str(exc)
    return TorchwiseError(what, values={"path": str(path), "error": reason, **values}, fix=fix)


def is_write_failure(exc: BaseException) -> bool:
    """The disk said no (full, file size limit, read-only, I/O error), whoever was writing: open() and
    os raise OSError, safetensors its own error with the OS's words, torch.save a RuntimeError."""
    if isinstance(exc, OSError):
        return True
    return isinstance(exc, safetensors_errors() + (RuntimeError,)) and (
        "os error" in str(exc).lower() or "write" in str(exc).lower())


@contextlib.contextmanager
def atomic_write_path(path: Path, *, root: Path | None = None) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success fsync it and rename it over `path`.

    The temporary is a new file under a random name (created exclusively: never a link or a file that was
    there), so the writer opens a file of this process's own; the rename replaces whatever `path` is,
    a symbolic link included, never what a link points to. With `root` (the run folder `path` lies in),
    the folders between are checked and made as `confined` says.
    The file gets the usual mode from the umask (0644 under umask 022), whoever wrote it."""
    path = Path(path)
    tmp: Path | None = None
    try:
        try:
            if root is not None:
                confined(path, root)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
            os.close(fd)
            tmp = Path(name)
            yield tmp
            usual_mode(tmp)
            fsync_file(tmp)
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except Exception as exc:
            if not is_write_failure(exc):
                raise
            raise write_error("Could not write a file of the run.", path, exc,
                              "free disk space (or raise the file size limit), check that the folder is "
                              "writable, and run again (a training run continues with --resume); the previous "
                              "version of the file is unchanged", **space_and_limit(path.parent)) from exc
    finally:
        if tmp is not None:
            remove_tree(tmp)  # whatever the writer left there, a file or (it happens) a folder


def remove_tree(path: Path) -> None:
    """`path` gone, whatever it is: a link is unlinked (never what it points to), a folder removed with its files."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- writes that stay in the run folder


def _inside(real: str, root_real: str) -> bool:
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def link_out_error(links: list[tuple[Path, str]], root: Path) -> TorchwiseError:
    values: dict[str, Any] = {"run folder": f"{root} ({os.path.realpath(root)})"}
    for link, target in links[:10]:
        values[f"link {link}"] = f"points to {target}"
    if len(links) > 10:
        values["more links"] = str(len(links) - 10)
    names = " ".join(str(link) for link, _ in links[:3]) + (" ..." if len(links) > 3 else "")
    return TorchwiseError(
        "The run folder holds a symbolic link that leads out of it; torchwise writes its files only inside the "
        "run folder and never through such a link (it would overwrite what the link points to).",
        values=values,
        fix=f"remove the link (rm {names}: what it points to is left as it is) and run again, or choose another "
            "run folder; to keep a run on another disk, make the run folder itself the link")


# Folders of the run that other tools write themselves, with links of their own (W&B links its debug logs to
# its cache): the folder itself is checked, its contents are theirs.
OTHER_TOOLS_FOLDERS = ("wandb", "mlruns")


def links_out(root: Path) -> list[tuple[Path, str]]:
    """Every symbolic link under `root` (not followed: a linked folder is listed, not entered) that resolves
    outside where `root` resolves, with its resolved target; OTHER_TOOLS_FOLDERS are not entered."""
    root_real = os.path.realpath(root)
    found = []
    for folder, dirs, names in os.walk(root):
        for name in sorted(dirs + names):
            path = os.path.join(folder, name)
            if os.path.islink(path) and not _inside(os.path.realpath(path), root_real):
                found.append((Path(path), os.path.realpath(path)))
        if folder == os.fspath(root):
            dirs[:] = [d for d in dirs if d not in OTHER_TOOLS_FOLDERS]
    return found


def refuse_links_out(root: Path) -> None:
    """Refuse a run folder holding a link that leads out of it (each named), before anything is written."""
    found = links_out(Path(root)) if os.path.isdir(root) else []
    if found:
        raise link_out_error(found, Path(root))


def confined(path: Path, root: Path) -> Path:
    """`path` (a file or folder inside the run folder `root`) made ready for writing without leaving `root`:
    each folder between them is made where missing, and none may be a link that leads out; nor may `path`.
    (A link that stays inside is followed; an atomic write replaces one at `path`, an append refuses it.)"""
    path, root = Path(path), Path(root)
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        raise ValueError(f"{path} is not inside the run folder {root}") from None
    root_real = os.path.realpath(root)
    root.mkdir(parents=True, exist_ok=True)
    current = root
    for i, part in enumerate(rel.parts):
        current = current / part
        if os.path.islink(current) and not _inside(os.path.realpath(current), root_real):
            raise link_out_error([(current, os.path.realpath(current))], root)
        if i < len(rel.parts) - 1 and not os.path.lexists(current):
            with contextlib.suppress(FileExistsError):  # made meanwhile by another writer of the run
                current.mkdir()
    return path


def make_folder(path: Path, root: Path) -> Path:
    """The folder `path` inside the run folder `root`, made where missing, never through a link out of it."""
    confined(path, root)
    Path(path).mkdir(exist_ok=True)
    return Path(path)


def open_nofollow(path: Path, mode: str = "a", *, root: Path | None = None, newline: str | None = "") -> IO[str]:
    """A text file opened to append ("a") or write afresh ("w") that is never a symbolic link (O_NOFOLLOW):
    a link there, even one inside the run folder, is refused with an error naming it."""
    path = confined(Path(path), root) if root is not None else Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TorchwiseError("A file torchwise writes in the run folder is a symbolic link; torchwise does not "
                                 "write through it.", values={"link": str(path), "points to": os.path.realpath(path)},
                                 fix=f"remove the link (rm {path}: what it points to is left as it is) and run "
                                     "again") from None
        raise write_error("Could not open a file of the run for writing.", path, exc,
                          "check that the folder is writable and has free space, and run again",
                          **space_and_limit(path.parent)) from exc
    return os.fdopen(fd, mode, newline=newline, encoding="utf-8")


def safetensors_errors() -> tuple[type[BaseException], ...]:
    try:
        from safetensors import SafetensorError
    except ImportError:  # older safetensors: its error is a plain Exception subclass
        return ()
    return (SafetensorError,)


def write_text(path: Path, text: str, *, root: Path | None = None) -> None:
    """`path` holds `text` afterwards, or (after a crash or a full disk) what it held before. With `root`,
    the run folder `path` lies in: never written through a link out of it (see `confined`)."""
    with atomic_write_path(Path(path), root=root) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path, data: Any, *, root: Path | None = None, **dumps: Any) -> None:
    """`data` as indented JSON, written atomically (see write_text); `dumps`: json.dumps's own options."""
    write_text(path, json.dumps(data, **{"indent": 2, "sort_keys": True, **dumps}) + "\n", root=root)
