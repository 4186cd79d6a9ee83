"""Action hooks (issue 16): records for new node_suspect and critical device alerts, dry run, a real webhook."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from fleet import Job, job_events, merge, xid_event
from stepwatch.config import OnCallSettings
from stepwatch.models.oncall.action_hooks import ActionHooks
from engine_driver import replay
from stepwatch.models.wire.events import parse_event
from stepwatch.streams.action_sink import ActionSink

T0 = 1_764_000_000.0


def fleet_alerts():
    c = Job("job-c", ["n6", "n7"], start=T0)
    return list(replay(parse_event(e) for e in merge(job_events(c), [xid_event("n7", 1, 79, T0 + 40.0)])))


def test_records_for_new_suspects_and_critical_device_alerts_only():
    hooks = ActionHooks()
    alerts = fleet_alerts()
    records = [r for a in alerts if (r := hooks.record(a)) is not None]
    assert sorted(r["alert_type"] for r in records) == ["gpu_fault", "node_suspect"]
    for r in records:
        assert r["dry_run"] is True and r["action"]["exclude_nodes"] == ["n7"]
        assert r["commands"]["kubernetes"] == ["kubectl cordon n7"]
        assert r["commands"]["slurm"] == [f'scontrol update nodename=n7 state=drain reason="stepwatch '
                                          f'{r["failure_class"]} {r["alert_id"]}"']
    # once per alert id: the same alerts again give nothing
    assert [hooks.record(a) for a in alerts if hooks.record(a)] == []


def test_unsafe_node_names_are_not_rendered():
    hooks = ActionHooks()
    alert = next(a for a in fleet_alerts() if a.type == "gpu_fault")
    evil = dataclasses.replace(alert, id="evil", evidence={**alert.evidence, "action": {
        **alert.evidence["action"], "exclude_nodes": ["n7; rm -rf /", "ok-node.1"]}})
    record = hooks.record(evil)
    assert record["commands"]["kubernetes"] == ["kubectl cordon ok-node.1"]


class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_webhook_gets_the_dry_run_records_with_rendered_commands(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    _Hook.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    marker = tmp_path / "executed"
    try:
        settings = OnCallSettings(hooks_enabled=True, webhook_url=f"http://127.0.0.1:{server.server_port}/hook",
                                  executor=f"{sys.executable} -c \"open('{marker}', 'w').write('x')\"")
        sent = []

        async def send(key, value):
            sent.append((key, json.loads(value)))

        async def main():
            import aiohttp

            sink = ActionSink(settings, send=send)
            for alert in fleet_alerts():
                sink.offer(alert)
            assert sink.queue.qsize() == 2
            async with aiohttp.ClientSession() as session:
                while not sink.queue.empty():
                    await sink.deliver(sink.queue.get_nowait(), session)
            return sink

        sink = asyncio.run(main())
    finally:
        server.shutdown()
    assert sink.delivered == 2 and sink.webhook_failures == 0
    assert [ct for ct, _ in _Hook.received] == ["application/json"] * 2
    bodies = [b for _, b in _Hook.received]
    assert {b["alert_type"] for b in bodies} == {"gpu_fault", "node_suspect"}
    for b in bodies:
        assert b["dry_run"] is True and "executed" not in b
        assert b["commands"]["slurm"][0].startswith("scontrol update nodename=n7 state=drain reason=")
        assert b["commands"]["kubernetes"] == ["kubectl cordon n7"]
    assert [json.dumps(v, sort_keys=True) for _, v in sent] == [json.dumps(b, sort_keys=True) for b in bodies]
    assert not marker.exists()  # dry run: the executor never ran


def test_executor_runs_only_with_dry_run_off(tmp_path):
    out = tmp_path / "commands"
    script = f"import sys; open({str(out)!r}, 'a').write(sys.argv[1] + chr(10))"
    settings = OnCallSettings(hooks_enabled=True, dry_run=False, executor=f"{sys.executable} -c \"{script}\"")

    async def main():
        sink = ActionSink(settings)
        for alert in fleet_alerts():
            sink.offer(alert)
        records = []
        while not sink.queue.empty():
            record = sink.queue.get_nowait()
            await sink.deliver(record)
            records.append(record)
        return records

    records = asyncio.run(main())
    assert all(r["dry_run"] is False and r["executed"][0]["returncode"] == 0 for r in records)
    assert out.read_text().splitlines() == [r["commands"]["slurm"][0] for r in records]


def _gpu_fault(alerts):
    return next(a for a in alerts if a.type == "gpu_fault")


def test_node_names_must_match_whole_and_be_in_the_inventory(tmp_path):
    alert = _gpu_fault(fleet_alerts())
    evil = dataclasses.replace(alert, id="nl", evidence={**alert.evidence, "action": {
        **alert.evidence["action"], "exclude_nodes": ["n7\n", "n7 ", "n6", "n9"]}})
    record = ActionHooks().record(evil)
    assert record["commands"]["kubernetes"] == ["kubectl cordon n6", "kubectl cordon n9"]  # "n7\n" refused (fullmatch)
    assert [r["node"] for r in record["refused_nodes"]] == ["n7\n", "n7 "]
    inventory = tmp_path / "nodes"
    inventory.write_text("# the cluster's nodes\nn6\nn7\n\n")
    from stepwatch.models.oncall.action_hooks import load_inventory

    hooks = ActionHooks(inventory=load_inventory(str(inventory)))
    record = hooks.record(dataclasses.replace(evil, id="inv"))
    assert record["commands"]["slurm"] == [f'scontrol update nodename=n6 state=drain reason="stepwatch '
                                           f'{record["failure_class"]} inv"']
    assert {r["node"]: r["reason"] for r in record["refused_nodes"]}["n9"] == "not in the node inventory"
    assert hooks.refused == 3


def test_a_forged_xid_for_a_never_seen_node_renders_no_drain():
    """The worker's wiring: ``TelemetryHub.reported_before`` (a node's agent must have reported first)."""
    from stepwatch.models.detection import DetectionEngine

    def run(first_report: bool):
        engine = DetectionEngine()
        hooks = ActionHooks(reported=engine.telemetry.reported_before)
        c = Job("job-c", ["n6", "n7"], start=T0)
        agent = [{"v": 1, "kind": "gpu", "node": "n7", "ts": T0 + 1.0, "gpu": 1, "temp_c": 60.0}] if first_report else []
        events = merge(job_events(c), agent, [xid_event("n7", 1, 79, T0 + 40.0)])
        alerts = list(replay((parse_event(e) for e in events), engine=engine))
        return hooks.record(_gpu_fault(alerts))

    forged = run(first_report=False)
    assert forged["commands"] == {"slurm": [], "kubernetes": []}
    assert forged["refused_nodes"] == [{"node": "n7", "reason": "its node agent had not reported before the alert"}]
    real = run(first_report=True)
    assert real["commands"]["kubernetes"] == ["kubectl cordon n7"] and real["refused_nodes"] == []
