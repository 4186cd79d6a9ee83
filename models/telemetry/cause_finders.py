"""Cause finders: what names an alert's suspected causes (``evidence.suspected_causes``), behind one protocol and
listed in the registry (models/registry.py ``CAUSE_FINDERS``). The telemetry hub (models/telemetry/telemetry_hub.py)
asks the finders that ``apply`` to an alert for its ``suspects`` near the time it began, and combines them: the
ranks' own GPUs and ports first, host signals after them, and for a job-wide alert the comparison of all the job's
nodes (or the fabric incident they are in)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from ..alert_types import ENRICHED_TYPES
from ..alerts import Alert
from .causes import SuspectedCause
from .fabric import FabricCorrelator
from .host import HostCorrelator

if TYPE_CHECKING:
    from .telemetry_correlator import TelemetryCorrelator


class CauseView(Protocol):
    """What a finder may ask about where jobs run (the hub answers, read-only)."""

    def placement(self, job: str, rank: int) -> tuple[str | None, int | None]:
        """The node and GPU of a job's rank, as its step events said ((None, None): not known)."""

    def rank_nodes(self, job: str) -> list[str]:
        """The nodes the job's ranks run on, as their step events said."""

    def job_nodes(self, job: str) -> tuple[str, ...]:
        """Every node of the job: its ranks' and those its other events named."""


@runtime_checkable
class CauseFinder(Protocol):
    """One way of naming suspected causes: ``applies`` to an alert or not; ``suspects(alert, at, view)``: the causes
    it finds around ``at``, best first (None: it cannot judge, e.g. too few nodes have telemetry to compare)."""

    name: ClassVar[str]

    def applies(self, alert: Alert) -> bool: ...

    def suspects(self, alert: Alert, at: float, view: CauseView) -> list[SuspectedCause] | None: ...


class HubParts(Protocol):
    """The hub's correlators a finder is made from."""

    correlator: TelemetryCorrelator
    host_correlator: HostCorrelator
    fabric: FabricCorrelator


class RankCauses:
    """Spikes and faults of the GPUs and ports of the ranks an alert names (models/telemetry/telemetry_correlator.py)."""

    name: ClassVar[str] = "ranks"

    def __init__(self, correlator: TelemetryCorrelator) -> None:
        self.correlator = correlator

    @classmethod
    def of(cls, hub: HubParts) -> RankCauses:
        return cls(hub.correlator)

    def applies(self, alert: Alert) -> bool:
        return alert.type in ENRICHED_TYPES

    def suspects(self, alert: Alert, at: float, view: CauseView, *, until: float | None = None
                 ) -> list[SuspectedCause]:
        """``until``: a firing straggler's causes are looked for up to now (what shows while it lasts counts)."""
        return self.correlator.suspects(alert, at=at, until=until)


class HostCauses:
    """IO, CPU and memory pressure and OOM kills on the alert's nodes (models/telemetry/host.py)."""

    name: ClassVar[str] = "host"

    def __init__(self, correlator: HostCorrelator) -> None:
        self.correlator = correlator

    @classmethod
    def of(cls, hub: HubParts) -> HostCauses:
        return cls(hub.host_correlator)

    def applies(self, alert: Alert) -> bool:
        return HostCorrelator.enriches(alert)

    def suspects(self, alert: Alert, at: float, view: CauseView) -> list[SuspectedCause]:
        return self.correlator.suspects(alert, at=at, placement=view.placement, job_nodes=view.rank_nodes)


class FabricCauses:
    """A job-level alert's nodes compared with each other: the components that stand out
    (models/telemetry/fabric.py)."""

    name: ClassVar[str] = "fabric"

    def __init__(self, fabric: FabricCorrelator) -> None:
        self.fabric = fabric

    @classmethod
    def of(cls, hub: HubParts) -> FabricCauses:
        return cls(hub.fabric)

    def applies(self, alert: Alert) -> bool:
        return FabricCorrelator.applies(alert)

    def suspects(self, alert: Alert, at: float, view: CauseView) -> list[SuspectedCause] | None:
        found = self.fabric.suspects(view.job_nodes(alert.job), at)
        return None if found is None else [s.cause() for s in found]
