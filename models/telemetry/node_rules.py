"""The node-level rules as ``NodeRule``s (models/rule.py): each wraps its detector without changing it.

One class per registered node rule (models/registry.py ``NODE_RULES``): it says what the rule consumes and
declares (``spec``), builds its detector from the settings, feeds it, and lists, closes and reconfigures its
alerts through the common methods. The telemetry hub (models/telemetry/telemetry_hub.py) makes one of each
for the worker and drives them; the detectors' own modules keep the maths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..alert_types import AlertStatus, AlertType
from ..resolution import Resolution
from ..rule import NodeRule, RuleSpec, Signal, closed
from .device_rules import DeviceRules, device_rules
from .host import HostSettings
from .telemetry_hub import TelemetrySettings
from .incidents import FabricIncidents, IntermittentIncidents, NodeIncidents
from .telemetry_tracker import TelemetryTracker

if TYPE_CHECKING:
    from ..alerts import Alert
    from ..wire.events import Event


class NodeEnv(Protocol):
    """What a node rule may ask of the hub that makes it."""

    settings: Any  # TelemetrySettings (models/telemetry/telemetry_hub.py)
    host_settings: HostSettings

    def placements(self) -> dict[str, dict[int, tuple]]:
        """job -> rank -> (node, gpu), as the job's step events said."""
        ...

    def jobs_on(self, nodes: tuple[str, ...]) -> list[str]:
        """The jobs with ranks on any of ``nodes``."""
        ...

    def ranks_on(self, job: str, node: str) -> tuple[int, ...]:
        """The ranks of ``job`` on ``node``."""
        ...


#: The link and GPU faults the tracker's alerts are classified as (models/oncall/actions.py), and the causes
#: it names for other alerts (spikes; host signals are named through the hub's host correlator).
TELEMETRY_CLASSES = ("xid_other",  # first: a gpu_fault's class by its type alone (RuleSpec.failure_classes)
                     "xid_79_off_bus", "xid_74_nvlink", "xid_48_dbe", "ecc_dbe", "xid_63_row_remap",
                     "xid_64_row_remap_failure", "xid_92_sbe_rate", "xid_94_contained_ecc", "xid_95_uncontained_ecc",
                     "xid_gsp", "app_xid", "nvlink_down", "pcie_downgrade", "thermal_throttle", "power_throttle",
                     "link_errors", "link_down", "network_congestion", "host_io", "host_cpu_memory", "host_oom")


class TelemetryRule(NodeRule):
    """GPU faults (Xid, ECC, throttling, NVLink, PCIe) and a node's link errors (models/telemetry/telemetry_tracker.py);
    its spikes are what names suspected causes of job alerts."""

    spec = RuleSpec(name="telemetry", consumes=frozenset({Signal.TELEMETRY, Signal.TICKS}),
                    alert_types=(AlertType.GPU_FAULT, AlertType.LINK_ERRORS), failure_classes=TELEMETRY_CLASSES,
                    settings=TelemetrySettings)
    kinds = frozenset({"gpu", "xid", "link", "topology"})

    def __init__(self, env: NodeEnv, needs: dict[str, NodeRule]) -> None:
        s = env.settings
        self.tracker = TelemetryTracker(
            baseline_samples=s.baseline_samples, baseline_min_samples=s.baseline_min_samples,
            rate_factor=s.rate_factor, bandwidth_collapse_ratio=s.bandwidth_collapse_ratio,
            clock_drop_ratio=s.clock_drop_ratio, throttle_min_samples=s.throttle_min_samples,
            link_error_window=s.link_error_window, link_error_min_samples=s.link_error_min_samples,
            clear_after=s.clear_after, fault_hold_seconds=s.fault_hold_seconds, app_xids=s.app_xid_set(),
            max_spikes_per_node=s.max_spikes_per_node)

    def update(self, event: Event) -> list[Alert]:
        return self.tracker.update(event)

    def tick(self, now: float) -> list[Alert]:
        return self.tracker.tick(now)

    def open_alerts(self) -> list[Alert]:
        return self.tracker.firing()

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed(self.tracker.close(at, reason), resolution, reason)

    def reconfigure(self, settings: TelemetrySettings) -> None:
        """Thresholds apply from the next sample; baseline sizes and ``link_error_window`` to components first
        seen after (existing windows keep their length)."""
        s, t = settings, self.tracker
        if not 1 <= s.link_error_min_samples <= s.link_error_window:
            raise ValueError("need 1 <= link_error_min_samples <= link_error_window")
        t.baseline_samples, t.baseline_min_samples = s.baseline_samples, s.baseline_min_samples
        t.rate_factor, t.bandwidth_collapse_ratio = s.rate_factor, s.bandwidth_collapse_ratio
        t.clock_drop_ratio, t.throttle_min_samples = s.clock_drop_ratio, s.throttle_min_samples
        t.link_error_window, t.link_error_min_samples = s.link_error_window, s.link_error_min_samples
        t.clear_after, t.fault_hold_seconds, t.app_xids = s.clear_after, s.fault_hold_seconds, s.app_xid_set()

    def capped(self) -> dict[str, int]:
        return self.tracker.capped


class DeviceRule(NodeRule):
    """gpu_idle, gpu_hot and hbm_full against the job's progress (models/telemetry/device_rules.py)."""

    spec = RuleSpec(name="device", consumes=frozenset({Signal.TELEMETRY, Signal.RANK_STEPS, Signal.TICKS}),
                    alert_types=(AlertType.GPU_IDLE, AlertType.GPU_HOT, AlertType.HBM_FULL),
                    failure_classes=("gpu_idle", "gpu_hot", "hbm_full"), settings=HostSettings)
    kinds = frozenset({"gpu"})

    def __init__(self, env: NodeEnv, needs: dict[str, NodeRule]) -> None:
        self.rules: DeviceRules = device_rules(env.host_settings, env.placements)

    def update(self, event: Event) -> list[Alert]:
        return self.rules.update(event)

    def on_steps(self, job: str, steps: list[int], step_times: list[float]) -> None:
        self.rules.observe_steps(job, steps, step_times)

    def tick(self, now: float) -> list[Alert]:
        if self.rules.watching:
            self.rules.rebuild()  # ranks placed or moved since: gpu_idle/hbm_full see them
        return []

    def open_alerts(self) -> list[Alert]:
        return self.rules.firing()

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed(self.rules.close(at, reason), resolution, reason)

    def reconfigure(self, settings: HostSettings) -> None:
        r, h = self.rules, settings
        r.idle_util_pct, r.idle_seconds = h.gpu_idle_util_pct, h.gpu_idle_seconds
        r.hot_temp_c, r.hot_samples = h.gpu_hot_temp_c, h.gpu_hot_samples
        r.hbm_ratio, r.hbm_step_growth = h.hbm_full_ratio, h.hbm_step_growth
        r.hot_clear_c, r.hbm_clear_ratio, r.idle_clear_pct = h.gpu_hot_clear_c, h.hbm_full_clear_ratio, h.gpu_idle_clear_pct
        r.clear_seconds = h.device_clear_seconds


class _IncidentRule(NodeRule):
    """A node rule that is an incidents object of models/telemetry/incidents.py (``self.incidents``: ``filter``,
    ``firing``, ``close``) fed alerts: the three methods said once."""

    incidents: Any

    def on_alerts(self, alerts: list[Alert]) -> list[Alert]:
        return self.incidents.filter(alerts)

    def open_alerts(self) -> list[Alert]:
        return self.incidents.firing()

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed(self.incidents.close(at, reason), resolution, reason)


class FabricRule(_IncidentRule):
    """Many nodes' ports erring at once: one fabric incident instead of a link alert per node
    (models/telemetry/incidents.py). Takes the telemetry rule's alerts as they leave; the timer releases a node's
    alert that waited for the other nodes' samples."""

    spec = RuleSpec(name="fabric", consumes=frozenset({Signal.ALERTS, Signal.TICKS}), alert_types=(AlertType.FABRIC,),
                    failure_classes=("fabric",), settings=None, needs=("telemetry",))

    def __init__(self, env: NodeEnv, needs: dict[str, NodeRule]) -> None:
        telemetry = needs["telemetry"]
        assert isinstance(telemetry, TelemetryRule)
        self.incidents: FabricIncidents = FabricIncidents(telemetry.tracker, jobs_on=env.jobs_on)

    def tick(self, now: float) -> list[Alert]:
        return self.incidents.tick(now)



#: The classes a straggler alert can be classified as (the straggler rule's: models/job_rules.py).
STRAGGLER_CLASSES = ("straggler_unexplained", "input_pipeline")


class NodeIncidentRule(_IncidentRule):
    """The stragglers of most ranks of one node, with one kind of cause, as one node incident
    (models/telemetry/incidents.py ``NodeIncidents``). Takes the job rules' alerts once their causes are named."""

    spec = RuleSpec(name="node_incident", consumes=frozenset({Signal.ENRICHED}), alert_types=(AlertType.STRAGGLER,),
                    failure_classes=STRAGGLER_CLASSES, settings=None)

    def __init__(self, env: NodeEnv, needs: dict[str, NodeRule]) -> None:
        self.incidents: NodeIncidents = NodeIncidents(env.ranks_on)


class IntermittentRule(NodeRule):
    """A rank straggling again soon after its last episode ended: the same incident, under the first episode's id
    (models/telemetry/incidents.py ``IntermittentIncidents``). Takes the job rules' alerts once their causes are
    named, after the node incidents."""

    spec = RuleSpec(name="intermittent_incident", consumes=frozenset({Signal.ENRICHED}),
                    alert_types=(AlertType.STRAGGLER,), failure_classes=STRAGGLER_CLASSES, settings=None)

    def __init__(self, env: NodeEnv, needs: dict[str, NodeRule]) -> None:
        self.incidents: IntermittentIncidents = IntermittentIncidents()
        #: Incidents now firing (an episode after the first, under the first one's id), by id: latest version.
        self._open: dict[str, Alert] = {}

    def on_alerts(self, alerts: list[Alert]) -> list[Alert]:
        out = self.incidents.filter(alerts)
        for alert in out:
            if alert.evidence.get("intermittent") is True:
                if alert.status == AlertStatus.FIRING:
                    self._open[alert.id] = alert
                else:
                    self._open.pop(alert.id, None)
        return out

    def open_alerts(self) -> list[Alert]:
        return list(self._open.values())

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        """Resolve the firing incidents and forget their ranks' episodes (the next one starts a new incident)."""
        out = [a.resolved(at=at, summary=f"resolved ({reason}): {a.summary}") for a in self._open.values()]
        self.incidents.forget(set(self._open))
        self._open.clear()
        return closed(out, resolution, reason)
