"""What the node agent refused to read or to speak for, counted by cause and logged once per cause.

The agent runs as root among processes and files any local user controls (docs/security.md, "The
node-local attacker"): every input it turns down is counted here, never dropped silently, and each
cause is logged once (a hostile user cannot flood the agent's log).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import Counter

log = logging.getLogger("stepwatch.agent")

__all__ = ["Refusal", "Refusals"]


class Refusal(enum.Enum):
    """Why the agent would not read a file or speak for a process."""

    #: No launcher (Slurm job cgroup, Kubernetes pod cgroup, torchrun of the same user) vouches for the process.
    UNVOUCHED = "unvouched_process"
    #: The job its environment names is not the one its launcher vouches for.
    NAME_NOT_VOUCHED = "job_name_not_vouched"
    #: Another user's process, under a stronger or older launcher, holds that job name on this node.
    NAME_HELD_BY_OTHER_USER = "job_name_held_by_other_user"
    #: The file's last component is a symbolic link (opened with O_NOFOLLOW).
    SYMLINK = "symlink"
    #: Not the type expected (a FIFO or a device where a regular file was expected, or the reverse).
    WRONG_TYPE = "wrong_file_type"
    #: The file is not owned by the uid of the process it belongs to.
    WRONG_OWNER = "wrong_file_owner"
    #: Larger than the cap, refused before reading.
    TOO_LARGE = "file_too_large"
    #: A Flight Recorder dump that would build more objects than the unpickler's budget.
    UNPICKLE_BUDGET = "dump_over_object_budget"
    #: A read that did not finish by its deadline (left to its own thread).
    READ_DEADLINE = "read_past_deadline"
    #: Every reader thread is still stuck in an earlier read.
    READERS_BUSY = "readers_busy"
    #: A RAS poll that did not finish by its overall deadline.
    RAS_DEADLINE = "ras_past_deadline"
    #: A RAS answer naming a process the answering server's user does not own.
    RAS_FOREIGN = "ras_answer_for_other_user"
    #: Inspector records beyond what a window can hold (a coll_sn repeated), or over the reader's total budget.
    EXCESS_RECORDS = "excess_records"


class Refusals:
    """Counts per :class:`Refusal`; the first of each cause is logged with its detail. Thread-safe."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._said: set[Refusal] = set()
        self._lock = threading.Lock()

    def refuse(self, cause: Refusal, detail: str) -> None:
        with self._lock:
            self.counts[cause.value] += 1
            first = cause not in self._said
            self._said.add(cause)
        if first:
            log.warning("agent refused (%s, logged once, then counted): %s", cause.value, detail)

    def __getitem__(self, cause: Refusal) -> int:
        return self.counts[cause.value]
