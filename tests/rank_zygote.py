"""Start a job's ranks from one process that imported the heavy modules once: ``python tests/rank_zygote.py
--world N --logs DIR --preload torch,... SCRIPT ARGS``.

Each rank is its own OS process, forked before any rank runs: it sets torchrun's variables (RANK, LOCAL_RANK),
sends its output to DIR/rankR.log and runs SCRIPT as ``__main__`` (``{rank}`` in ARGS: its rank). Four ranks
importing torch (and transformers, Lightning, DeepSpeed) each cost 8-25 s of CPU on a 2-core CI machine;
forked, they share one import. Exits 0 when every rank did, else 1; DIR/codes.json has each rank's exit
status. Used by tests/train_support.py.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import signal
import sys


def die_with_parent() -> None:
    """A zygote killed outright (a test's timeout) takes its ranks with it (Linux ``PR_SET_PDEATHSIG``)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the SIGTERM path still stops them
        pass


def run_rank(rank: int, logs: str, script: str, args: list[str]) -> int:
    die_with_parent()
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    fd = os.open(os.path.join(logs, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--logs", required=True)
    parser.add_argument("--preload", default="")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(opts.script)))  # as ``python SCRIPT`` would
    for name in filter(None, opts.preload.split(",")):
        importlib.import_module(name)
    os.environ["WORLD_SIZE"] = str(opts.world)
    pids = {}
    for rank in range(opts.world):
        pid = os.fork()
        if pid == 0:
            os._exit(run_rank(rank, opts.logs, opts.script, [a.replace("{rank}", str(rank)) for a in opts.args]))
        pids[pid] = rank

    def stop(signum, _frame):  # the test gave up on the job: its ranks go with it
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    codes = {}
    while len(codes) < len(pids):
        pid, status = os.wait()
        if pid in pids:
            codes[pids[pid]] = os.waitstatus_to_exitcode(status)
    with open(os.path.join(opts.logs, "codes.json"), "w") as f:
        json.dump([codes[r] for r in range(opts.world)], f)
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
