"""A JSON Lines output that never ends in half a line: ``record`` on a full disk (ENOSPC), ``/dev/full`` or a
closed pipe stops with every line it wrote complete (issue 44 row 14)."""

from __future__ import annotations

import os
import stat
import sys

#: Whole lines are written in chunks of about this size (one system call each, not one per line).
CHUNK = 1 << 20


class LineOutput:
    """Bytes in, whole lines out. On a write error the file is cut back to its last complete line (a regular
    file; a pipe or device keeps what it took) and the error names the file."""

    def __init__(self, path: str) -> None:
        self.name = "stdout" if path == "-" else path
        self.stream = None  # a stdout without a file descriptor (captured, embedded): written through
        if path == "-":
            sys.stdout.flush()
            try:
                self.fd, self.owned = sys.stdout.fileno(), False
            except (AttributeError, OSError, ValueError):
                self.fd, self.owned, self.stream = -1, False, getattr(sys.stdout, "buffer", sys.stdout)
        else:
            self.fd, self.owned = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), True
        self.regular = self.stream is None and stat.S_ISREG(os.fstat(self.fd).st_mode)
        self.buffer = bytearray()
        self.lines_written = 0

    def write(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) >= CHUNK:
            self._flush()

    def _flush(self) -> None:
        end = self.buffer.rfind(b"\n") + 1
        if not end:
            return
        chunk = memoryview(self.buffer)[:end]
        done = 0
        try:
            while done < end:
                if self.stream is not None:
                    self.stream.write(bytes(chunk[done:]))
                    self.stream.flush()
                    done = end
                else:
                    done += os.write(self.fd, chunk[done:])
        except OSError as exc:
            complete = bytes(chunk[:done]).rfind(b"\n") + 1  # the last line it took whole
            if self.regular and complete != done:
                try:
                    os.ftruncate(self.fd, os.lseek(self.fd, 0, os.SEEK_CUR) - (done - complete))
                except OSError:
                    pass  # the error that matters is the write's
            self.lines_written += bytes(chunk[:complete]).count(b"\n")
            chunk.release()
            del self.buffer[:]
            raise OSError(exc.errno, exc.strerror, self.name) from None
        self.lines_written += bytes(chunk).count(b"\n")
        chunk.release()
        del self.buffer[:end]

    def close(self) -> None:
        """Writes what is whole; a line cut short by Ctrl-C between its parts is left out."""
        try:
            self._flush()
        finally:
            if self.owned:
                os.close(self.fd)
            self.owned = False
