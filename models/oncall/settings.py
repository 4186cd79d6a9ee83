"""Settings of where alerts leave the engine (models/oncall/oncall.py), in a module that imports no detector."""

from __future__ import annotations

from dataclasses import dataclass

from ..tunable import MAX_SECONDS, runtime


@dataclass(frozen=True, kw_only=True)
class OnCallSettings:
    """Scope and action on every alert, restarts, the node ledger and action hooks (docs/operations.md, "On call")."""

    #: Overrides of the failure-class table (models/oncall/actions.py): JSON, or ``@path`` of a JSON file.
    failure_classes: str = ""
    #: The node ledger counts a node's incidents over this sliding window (seconds) ...
    ledger_window_seconds: float = runtime(24 * 3600.0, low=1.0, high=MAX_SECONDS)
    #: ... and a node implicated in this many distinct jobs within it is a ``node_suspect``.
    ledger_min_jobs: int = runtime(2, low=1, high=10_000)
    #: Compacted topic of incidents (keyed by node and alert): every worker's ledger reads it whole.
    ledger_topic: str = "ledger"
    #: Compacted topic of job placement (keyed by job), written by each job's owner, read by every worker.
    placement_topic: str = "placement"
    #: A node alert names the jobs that had ranks on the node within this many seconds of it.
    placement_window_seconds: float = 300.0
    #: A job restarted when a rank's step goes back by at least this many steps below its own last one ...
    restart_min_steps_back: int = runtime(2, low=1, high=1_000_000)
    #: ... stamped more than this many seconds after it, when most of the job's ranks do so (models/relaunch.py, the
    #: hang rule's reading and line: one host's clock step and a late copy of an older event are one rank, never most).
    restart_min_silence_seconds: float = runtime(1.0, low=0.0, high=86_400.0)
    #: Action hooks: off by default. On: ``evidence.action`` of new node_suspect and critical device
    #: alerts goes to the actions topic (and the webhook, if set).
    hooks_enabled: bool = False
    actions_topic: str = "actions"
    #: Optional webhook URL (JSON POST) for actions.
    webhook_url: str = ""
    #: Dry run (the default): commands are rendered into the payload, never executed.
    dry_run: bool = True
    #: Executor command run with the rendered command appended, only when dry_run is off; empty: none.
    executor: str = ""
    #: Command templates ({node}, {reason}) rendered into each action.
    slurm_template: str = "scontrol update nodename={node} state=drain reason=\"{reason}\""
    kubernetes_template: str = "kubectl cordon {node}"
    #: Optional file of the nodes actions may name (one a line); others are refused (docs/security.md).
    node_inventory_file: str = ""
    #: Compacted topic of humans' releases of held drains (``stepwatch actions release``), read by every worker.
    releases_topic: str = "releases"
    #: The drain budget (models/oncall/budget.py): at most this many nodes drained by stepwatch per hour ...
    drain_budget_per_hour: int = runtime(2, low=0, high=10_000)
    #: ... this many per job per hour ...
    drain_budget_per_job_hour: int = runtime(1, low=0, high=10_000)
    #: ... and this share (%) of the nodes seen drained at once (at least one node); beyond: held for a human.
    drain_budget_fleet_percent: float = runtime(5.0, low=0.0, high=100.0)
    #: The escalation ladder for slow nodes (models/oncall/ladder.py): a straggler's loss is counted over this
    #: horizon (or the job's remaining time, from its ``total_steps``, when shorter) ...
    ladder_horizon_seconds: float = runtime(6 * 3600.0, low=60.0, high=MAX_SECONDS)
    #: ... against a restart's cost: the work since the job's last checkpoint plus this restart time (when the
    #: job's own restarts have not taught one) ...
    ladder_restart_seconds: float = runtime(600.0, low=0.0, high=86_400.0)
    #: ... and a loss below this many GPU-hours is only observed (above: the job's owner is notified).
    ladder_notify_gpu_hours: float = runtime(1.0, low=0.0, high=1e9)

    def check(self) -> None:
        """``ValueError`` unless the settings are usable as a whole (the environment's included)."""
        if self.ledger_window_seconds <= 0:
            raise ValueError("oncall.ledger_window_seconds must be positive")
