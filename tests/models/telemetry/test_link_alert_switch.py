"""A per-node ``link_errors`` alert names the switch and port behind the NIC where topology knows them (issue 43
item 3): in its summary, its evidence and its on-call sentence, as the fabric alert does. Without topology the
alert is what it was (recordings replay byte for byte)."""

from __future__ import annotations

import pytest

from stepwatch.models.registry import type_classes
from stepwatch.models.oncall.actions import Classifier
from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker
from stepwatch.models.wire.telemetry_events import LinkEvent, TopologyEvent

T0 = 1_700_000_000.0


def flapping(node: str, device: str, n: int = 30) -> list[LinkEvent]:
    """A port whose symbol errors climb from sample 10 on (a flapping optic)."""
    return [LinkEvent(node=node, ts=T0 + i, device=device, port=1, state="ACTIVE", rate=400.0,
                      counters={"symbol_error": max(0, i - 10) * 37, "port_xmit_data": i * 6_000_000_000})
            for i in range(n)]


def link_alert(events) -> dict:
    tracker = TelemetryTracker()
    alerts = [a for ev in events for a in tracker.update(ev)]
    fired = [a for a in alerts if a.type == "link_errors" and a.status == "firing"]
    assert fired, alerts
    return Classifier(types=type_classes()).annotate(fired[0]).to_dict()


@pytest.mark.parametrize("device,switch,port", [("mlx5_0", "leaf-07", "12"), ("mlx5_3", "ib-sw-a1", "Eth1/33")])
def test_the_link_alert_names_the_switch_and_port_behind_the_nic(device, switch, port):
    topo = TopologyEvent(node="n1", ts=T0, nics=({"device": device, "ports": [1], "switch": switch,
                                                  "neighbors": [{"port": 1, "switch": switch, "switch_port": port,
                                                                 "source": "map"}]},))
    alert = link_alert([topo, *flapping("n1", device)])
    assert alert["summary"].endswith(f"; cabled to switch {switch} port {port}"), alert["summary"]
    assert alert["evidence"]["switch"] == switch and alert["evidence"]["switch_port"] == port
    action = alert["annotations"]["recommended_action"]
    assert action.endswith(f"{device} is cabled to switch {switch} port {port}."), action


def test_without_topology_the_link_alert_is_unchanged():
    alert = link_alert(flapping("n1", "mlx5_0"))
    assert "switch" not in alert["evidence"] and "cabled" not in alert["summary"]
    assert alert["annotations"]["recommended_action"] == (
        "Network port errors on n1: check the cable, transceiver and switch port.")
