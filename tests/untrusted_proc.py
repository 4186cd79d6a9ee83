"""A local user's process on the agent's node, for tests/producers/test_agent_trust.py (stdlib only: run with the
system's python3, as ``nobody`` through ``setpriv``, or as root for a genuine rank).

    untrusted_proc.py READY sleep
    untrusted_proc.py READY fifo PIPE DUMP ACTION
    untrusted_proc.py READY ras MODE ANSWER_FILE
    untrusted_proc.py READY file PATH SOURCE       (PATH a symlink to SOURCE when SOURCE starts with @)

READY is a file written once the process is set up (its pid, or the RAS port). ``fifo`` is a stand-in for
ProcessGroupNCCL's watchdog (DumpPipe: mkfifo, opened O_RDONLY|O_NONBLOCK): on each write to PIPE it does
ACTION to DUMP: ``copy:SRC`` (a dump, as torch writes it), ``symlink:TARGET``, ``fifo`` (a FIFO in its place),
``sparse:N`` (an N-byte sparse file), ``relink:LINK:TARGET`` (a directory link on DUMP's path moved).
``ras`` listens on 127.0.0.1 and speaks RAS's handshake, then
``trickle`` (one byte every 5 s, never done) or ``answer`` (ANSWER_FILE's bytes, then closes).
"""

import os
import select
import socket
import sys
import time


def ready(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def fifo(ready_path, pipe, dump, action):
    os.mkfifo(pipe)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    ready(ready_path, str(os.getpid()))
    while True:
        select.select([fd], [], [], 600)
        if not os.read(fd, 128):
            time.sleep(0.05)  # no writer now: EOF until the next one opens the pipe
            continue
        kind, _, arg = action.partition(":")
        if kind != "relink" and os.path.lexists(dump):
            os.unlink(dump)
        if kind == "copy":
            with open(arg, "rb") as src, open(dump + ".tmp", "wb") as out:
                out.write(src.read())
            os.replace(dump + ".tmp", dump)
        elif kind == "symlink":
            os.symlink(arg, dump)
        elif kind == "fifo":
            os.mkfifo(dump)
        elif kind == "relink":  # a directory link moved elsewhere: relink:LINK:TARGET
            link, _, target = arg.partition(":")
            os.unlink(link)
            os.symlink(target, link)
        elif kind == "sparse":
            with open(dump, "wb") as out:
                out.truncate(int(arg))
        with open(pipe + ".asked", "a") as f:  # beside the pipe: the dump may now be in a folder it cannot write
            f.write("1\n")


def ras(ready_path, mode, answer_file):
    server = socket.create_server(("127.0.0.1", 0))
    ready(ready_path, str(server.getsockname()[1]))
    while True:
        conn, _ = server.accept()
        f = conn.makefile("rb")
        for raw in f:
            cmd = raw.decode().strip().upper()
            if cmd.startswith("CLIENT PROTOCOL"):
                conn.sendall(b"SERVER PROTOCOL 2\n")
            elif cmd.startswith("SET FORMAT"):
                conn.sendall(b"OK\n")
            elif cmd == "STATUS":
                if mode == "trickle":
                    ready(ready_path + ".trickling", "1")
                    try:
                        while True:
                            conn.sendall(b" ")
                            time.sleep(5)
                    except OSError:
                        break
                with open(answer_file, "rb") as a:
                    conn.sendall(a.read())
                conn.shutdown(socket.SHUT_RDWR)
                break
        conn.close()


def main():
    ready_path, mode, *args = sys.argv[1:]
    if mode == "sleep":
        ready(ready_path, str(os.getpid()))
        time.sleep(600)
    elif mode == "fifo":
        fifo(ready_path, *args)
    elif mode == "ras":
        ras(ready_path, *args)
    elif mode == "file":
        path, source = args
        path = path.replace("{pid}", str(os.getpid()))  # an Inspector log is named for its writer's pid
        if source.startswith("@"):
            os.symlink(source[1:], path)
        else:
            with open(path, "w") as f:
                f.write(source)
        ready(ready_path, str(os.getpid()))
        time.sleep(600)


if __name__ == "__main__":
    main()
