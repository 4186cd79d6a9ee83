"""The dashboard page's alert card, resolved history and hang header, in Chromium (issue 43 item 3).

The page is served as the worker serves it (render_dashboard) by a small local HTTP server whose heatmap
answers are fixed views (the shape of models/status.py heatmap_view): what the page's own script makes of
them is what is tested. Needs Debian's chromium package, as tests/streams/test_dashboard.py.
"""

from __future__ import annotations

import http.server
import json
import re
import threading

import pytest

from test_dashboard import CHROMIUM, chromium

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package: no chromium on PATH "
                                                       "(apt-get install -y chromium)")

NOW = 1_700_000_000.0


def hang_alert(**evidence) -> dict:
    return {"id": "hang-1", "type": "hang", "status": "firing", "severity": "critical", "job": "j", "ranks": [0, 1],
            "nodes": ["node-000"], "starts_at": NOW - 60, "summary": "hang: rank 1 never reached collective 7",
            "evidence": {"culprits": [{"rank": 1, "node": "node-000"}], **evidence}, "labels": {}, "annotations": {}}


def view(alerts: list[dict]) -> dict:
    return {"job": "j", "level": "rank", "rank_count": 2, "steps": [1, 2], "values": [[1.0, 1.0], [1.0, 1.0]],
            "rows": [{"label": f"rank {r}", "ranks": [r], "marked": bool(alerts), "mark": "hang" if alerts else None,
                      "marked_ranks": [r] if alerts else []}
                     for r in (0, 1)],
            "thresholds": {"ratio": 1.2, "critical": 1.5}, "series": [], "alerts": alerts, "settings": {},
            "summary": {"latest_step": 2, "step_rate": 1.0, "tokens_per_second": None, "ranks": 2, "phase": "train",
                        "ended": False, "open_alerts": len(alerts)},
            "now": NOW}


def serve(answers):
    """A server for the page and its heatmap: ``answers(n)`` is the n-th heatmap view asked for."""
    from stepwatch.streams.dashboard import render_dashboard

    asked = [0]

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/jobs/j/heatmap"):
                body, kind = json.dumps(answers(asked[0])).encode(), "application/json"
                asked[0] += 1
            else:
                body, kind = render_dashboard("j").encode(), "text/html"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_card_shows_the_action_and_the_hang_header_counts_event_time(tmp_path):
    # A sped-up job: its hang began "in the future" of the page's clock; the detector counted 300 s.
    alert = hang_alert(stalled_since=NOW + 500, stalled_seconds=300.0,
                       action={"kind": "restart_job", "nodes": ["node-000"], "retryable": True, "exclude_nodes": []})
    server = serve(lambda n: view([alert]))
    try:
        dom = chromium(f"http://127.0.0.1:{server.server_address[1]}/dashboard/j", tmp_path, "--dump-dom")
    finally:
        server.shutdown()
        server.server_close()
    assert 'data-ready="1"' in dom, dom[-2000:]
    assert '<div class="action">action: restart job (node-000)</div>' in dom
    header = dom[dom.index("<header>"):dom.index("</header>")]
    assert "no step for 300 s" in header, header
    with_sentence = dict(alert, annotations={"recommended_action": "Take stacks, then restart the job."})
    server = serve(lambda n: view([with_sentence]))
    try:
        dom = chromium(f"http://127.0.0.1:{server.server_address[1]}/dashboard/j", tmp_path, "--dump-dom")
    finally:
        server.shutdown()
        server.server_close()
    assert '<div class="action">action: Take stacks, then restart the job.</div>' in dom


def test_an_alert_that_resolves_stays_listed_as_resolved(tmp_path):
    alert = hang_alert(stalled_since=NOW - 60, stalled_seconds=60.0)
    server = serve(lambda n: view([alert] if n == 0 else []))  # open at the first poll, gone after
    try:
        dom = chromium(f"http://127.0.0.1:{server.server_address[1]}/dashboard/j", tmp_path, "--dump-dom")
    finally:
        server.shutdown()
        server.server_close()
    resolved = dom[dom.index('<ul id="resolved"'):]
    resolved = resolved[:resolved.index("</ul>")]
    assert re.search(r'<li class="resolved" data-alert-id="hang-1">\S+Z critical hang: hang: rank 1 never reached',
                     resolved), resolved
    assert '<div id="none">none</div>' in dom  # no longer open
