"""Helpers for the operator-surface tests: hand-made step events, HTTP polling, a fake Alertmanager."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import orjson
from kafka import KafkaProducer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def send_steps(bootstrap: str, topic: str, *, job: str, ranks: int, steps: range, slow_rank: int | None = None,
               factor: float = 1.3, step_seconds: float = 0.2, per_node: int = 8, tokens: float = 512.0,
               seed: int = 0, chunk: int = 1024) -> None:
    """Publish step events (no phase end) as batch envelopes; the last step ends about now."""
    rng = np.random.default_rng(seed + steps.start)
    t_end = time.time()
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=4 * 1024 * 1024)
    try:
        for k, step in enumerate(steps):
            ts = t_end - (len(steps) - 1 - k) * step_seconds
            compute = step_seconds * 0.75 * (1 + 0.01 * rng.standard_normal(ranks))
            if slow_rank is not None:
                compute[slow_rank] *= factor
            events = [{"v": 1, "kind": "step", "job": job, "rank": r, "step": step, "ts": round(ts, 6),
                       "step_time": step_seconds, "compute_time": round(float(compute[r]), 6),
                       "node": f"node-{r // per_node:03d}", "world_size": ranks, "tokens": tokens}
                      for r in range(ranks)]
            for i in range(0, ranks, chunk):
                producer.send(topic, key=job.encode(),
                              value=orjson.dumps({"v": 1, "kind": "batch", "events": events[i:i + chunk]}))
        producer.flush()
    finally:
        producer.close()


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get_json(url: str) -> tuple[int, dict]:
    status, body = get(url)
    return status, orjson.loads(body)


def wait_for(predicate, *, timeout: float = 60.0, interval: float = 0.3, what: str = "condition"):
    """Poll ``predicate()`` until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except (OSError, ValueError, KeyError) as exc:
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error {last_exc!r})" if last_exc else ""))


class FakeAlertmanager:
    """``POST /api/v2/alerts`` recorder in a thread; answers 503 to the first ``fail_first`` requests."""

    def __init__(self, fail_first: int = 0) -> None:
        self.posts: list[list[dict]] = []
        self.failed = 0
        self.fail_first = fail_first
        self.paths: list[str] = []
        lock = self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    outer.paths.append(self.path)
                    if outer.failed < outer.fail_first:
                        outer.failed += 1
                        self.send_response(503)
                        self.end_headers()
                        return
                    outer.posts.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeAlertmanager":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def alerts(self) -> list[dict]:
        with self.lock:
            return [a for post in self.posts for a in post]
