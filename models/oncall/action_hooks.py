"""Action hooks: what stepwatch would have an operator (or an executor) do, as records. Off by default.

For each **new** ``node_suspect`` alert and each new **critical device** alert (scope device),
one action record: the alert's ``evidence.action`` plus Slurm and Kubernetes commands rendered
for its ``exclude_nodes`` (the nodes to keep jobs off). Records go to the ``actions`` topic and an
optional webhook (streams/action_sink.py). stepwatch never runs them itself unless the operator
configures an executor *and* turns dry-run off (``STEPWATCH_ONCALL_DRY_RUN=false``).

Record (one JSON object)::

    {"v": 1, "kind": "action", "alert_id": "...", "alert_type": "node_suspect", "severity": "critical",
     "failure_class": "...", "ts": 1764000140.0, "dry_run": true, "action": {"kind": "drain_node", "nodes": [...],
     "retryable": false, "exclude_nodes": [...]}, "recommended_action": "...",
     "commands": {"slurm": ["scontrol update nodename=n7 state=drain reason=\\"stepwatch xid_79_off_bus ...\\""],
                  "kubernetes": ["kubectl cordon n7"]}}

Node names go into commands only when the whole name is a plain host name (letters, digits,
``.-_``; ``fullmatch``, so ``"n7\n"`` is refused too), so a node name can never inject shell syntax
or a line break into a rendered command; when an inventory is configured
(``STEPWATCH_ONCALL_NODE_INVENTORY_FILE``), only its nodes; and only a node whose agent had reported
before the alert's onset, ``node_suspect`` included (a forged Xid, or forged jobs' stragglers naming a
node never seen, render nothing: only agents speak for nodes). Each refused node is listed in the
record's ``refused_nodes`` with its reason (docs/security.md).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..alert_types import AlertStatus, Scope, Severity, facts
from ..alerts import Alert

#: A plain host name, matched with ``fullmatch`` (``$`` would let a trailing newline through).
SAFE_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def safe_node(name: object) -> bool:
    return isinstance(name, str) and SAFE_NODE.fullmatch(name) is not None


def load_inventory(path: str) -> frozenset[str]:
    """The node inventory: one node name a line, ``#`` comments and blank lines ignored."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read STEPWATCH_ONCALL_NODE_INVENTORY_FILE {path}: {exc.strerror}") from None
    return frozenset(s for line in lines if (s := line.split("#", 1)[0].strip()))
#: Action kinds that keep jobs off a node: the commands drain/cordon it.
DRAINING_KINDS = frozenset({"drain_node", "reset_gpu", "replace_gpu"})


class ActionHooks:
    """Chooses the alerts that deserve an action record, once per alert id.

    Hyperparameters (keyword-only): ``dry_run``; ``slurm_template`` and ``kubernetes_template``
    (``{node}``, ``{reason}``, ``{failure_class}`` and ``{alert_id}`` are replaced); ``max_ids`` alert ids
    remembered; ``inventory`` the nodes that may be named (None: any safe name); ``reported(node, ts)``
    whether the node's agent had reported before ``ts`` (None: not checked), asked for every alert.
    """

    def __init__(self, *, dry_run: bool = True, slurm_template: str = "scontrol update nodename={node} state=drain "
                 "reason=\"{reason}\"", kubernetes_template: str = "kubectl cordon {node}",
                 max_ids: int = 10_000, inventory: frozenset[str] | None = None,
                 reported: Callable[[str, float], bool] | None = None) -> None:
        self.inventory = inventory
        self.reported = reported
        #: Nodes left out of rendered commands (bad name, not in the inventory, agent never heard).
        self.refused = 0
        self.dry_run = dry_run
        self.slurm_template = slurm_template
        self.kubernetes_template = kubernetes_template
        self.max_ids = max_ids
        self._seen: OrderedDict[str, None] = OrderedDict()

    @staticmethod
    def _key(alert: Alert) -> str:
        # Once per alert id and action kind: a drain held for a human (models/oncall/budget.py) and later released
        # is the same alert again, now with its drain.
        action = alert.evidence.get("action")
        return f"{alert.id}/{action.get('kind') if isinstance(action, dict) else ''}"

    def wants(self, alert: Alert) -> bool:
        if alert.status != AlertStatus.FIRING or self._key(alert) in self._seen:
            return False
        return facts(alert.type).always_acts or (alert.severity == Severity.CRITICAL
                                                        and alert.scope == Scope.DEVICE)

    def record(self, alert: Alert) -> dict[str, Any] | None:
        """The action record for ``alert`` (None: not one that gets an action, or already done)."""
        if not self.wants(alert):
            return None
        self._seen[self._key(alert)] = None
        while len(self._seen) > self.max_ids:
            self._seen.popitem(last=False)
        action = dict(alert.evidence.get("action") or {})
        cls = str(alert.evidence.get("failure_class", "unknown"))
        reason = f"stepwatch {cls} {alert.id}"
        targets, refused = [], []
        for n in action.get("exclude_nodes") or ():
            why = self._refusal(n, alert)
            if why is None:
                targets.append(n)
            else:
                refused.append({"node": str(n)[:256], "reason": why})
        self.refused += len(refused)
        commands: dict[str, list[str]] = {"slurm": [], "kubernetes": []}
        if action.get("kind") in DRAINING_KINDS:
            for node in targets:
                # {failure_class} and {alert_id} too, so a site can word its own reason (deploy/slurm/).
                fields = {"node": node, "reason": reason, "failure_class": cls, "alert_id": alert.id}
                commands["slurm"].append(self.slurm_template.format(**fields))
                commands["kubernetes"].append(self.kubernetes_template.format(**fields))
        return {"v": 1, "kind": "action", "alert_id": alert.id, "alert_type": alert.type, "severity": alert.severity,
                "failure_class": cls, "ts": alert.starts_at, "nodes": list(alert.nodes), "dry_run": self.dry_run,
                "action": action, "recommended_action": alert.recommended_action, "commands": commands,
                "refused_nodes": refused}

    def _refusal(self, node: object, alert: Alert) -> str | None:
        """Why ``node`` may not be named in a command for ``alert`` (None: it may)."""
        if not safe_node(node):
            return "not a plain host name"
        if self.inventory is not None and node not in self.inventory:
            return "not in the node inventory"
        if self.reported is not None and not self.reported(node, alert.starts_at):
            return "its node agent had not reported before the alert"
        return None
