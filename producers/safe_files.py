"""Opening a file a local user controls, as root, without being led elsewhere.

The agent reads paths that another user's process named (a Flight Recorder dump, its FIFO) or
created (an NCCL Inspector log in a world-writable directory). :func:`open_checked`:

* resolves the path inside a root directory (``/proc/<pid>/root``: the process's own mount
  namespace) one component at a time, as ``openat2(RESOLVE_IN_ROOT)`` does: a symbolic link in a
  directory component is followed but never out of that root (an absolute target restarts at it,
  ``..`` stops at it);
* opens the last component ``O_PATH | O_NOFOLLOW`` (no side effect on a FIFO or a device, and a
  symlink there is refused), then ``fstat``: the expected type (a regular file, or a FIFO), owned
  by the expected uid, no larger than the cap, all before a byte is read;
* only then reopens that same inode (through ``/proc/self/fd``) with ``O_NONBLOCK | O_NOCTTY``:
  a FIFO swapped in later cannot block the open, nor a terminal become the agent's.
"""

from __future__ import annotations

import enum
import errno
import os
import stat
from pathlib import Path

from .refusals import Refusal

__all__ = ["Kind", "Refused", "open_checked", "stat_in_root"]

_MAX_LINKS = 40  # as the kernel's MAXSYMLINKS


class Kind(enum.Enum):
    REGULAR = "regular file"
    FIFO = "FIFO"


class Refused(Exception):
    """The file exists but is not one the agent may open; ``cause`` says why."""

    def __init__(self, cause: Refusal, detail: str) -> None:
        super().__init__(detail)
        self.cause = cause


def _walk(root: str | Path, rel: str) -> tuple[int, str]:
    """An O_PATH fd of the directory holding ``rel``'s last component (resolved inside ``root``), and that
    component. Raises OSError."""
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    stack = [root_fd]
    todo = [c for c in rel.split("/") if c not in ("", ".")]
    links = 0
    try:
        while len(todo) > 1:
            comp = todo.pop(0)
            if comp == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            try:
                fd = os.open(comp, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=stack[-1])
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                target = os.readlink(comp, dir_fd=stack[-1])  # raises EINVAL when it is no link: not a directory
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, "too many symbolic links") from None
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                todo[:0] = [c for c in target.split("/") if c not in ("", ".")]
                continue
            stack.append(fd)
        if not todo:
            raise OSError(errno.EISDIR, "no file name")
        last = stack.pop()
        return last, todo[0]
    finally:
        for fd in stack:
            os.close(fd)


def stat_in_root(root: str | Path, rel: str) -> os.stat_result:
    """``lstat`` of ``rel`` resolved inside ``root`` (its last component not followed). Raises OSError."""
    dir_fd, name = _walk(root, rel)
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    finally:
        os.close(dir_fd)


def open_checked(root: str | Path, rel: str, *, kind: Kind, uid: int | None, flags: int = os.O_RDONLY,
                 max_size: int | None = None) -> tuple[int, os.stat_result]:
    """Open ``rel`` inside ``root`` as the module's docstring says; returns ``(fd, fstat)``, the caller closes
    the fd. Raises :class:`Refused` (the file is not one to open) or OSError (absent, unreadable)."""
    dir_fd, name = _walk(root, rel)
    try:
        path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(path_fd)
        if stat.S_ISLNK(st.st_mode):
            raise Refused(Refusal.SYMLINK, f"{rel} is a symbolic link")
        is_kind = stat.S_ISREG(st.st_mode) if kind is Kind.REGULAR else stat.S_ISFIFO(st.st_mode)
        if not is_kind:
            raise Refused(Refusal.WRONG_TYPE, f"{rel} is not a {kind.value} (mode {stat.filemode(st.st_mode)})")
        if uid is not None and st.st_uid != uid:
            raise Refused(Refusal.WRONG_OWNER, f"{rel} is owned by uid {st.st_uid}, its process runs as uid {uid}")
        if max_size is not None and st.st_size > max_size:
            raise Refused(Refusal.TOO_LARGE, f"{rel} has {st.st_size} bytes, more than {max_size}")
        fd = os.open(f"/proc/self/fd/{path_fd}", flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    finally:
        os.close(path_fd)
    again = os.fstat(fd)
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):  # cannot happen through /proc/self/fd; checked anyway
        os.close(fd)
        raise Refused(Refusal.WRONG_TYPE, f"{rel} changed while being opened")
    return fd, again
