"""``stepwatch demo``: broker, worker, a simulated job with one straggler, and its alerts.

Everything is real: an Apache Kafka broker (started here unless one is configured), the
Faust worker in its own process, the simulator publishing through kafka-python, and the
alerts read back from the alerts topic.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from stepwatch.config import Settings
from stepwatch.models.alerts import format_alert


def _say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def run_demo(settings: Settings, *, ranks: int = 64, steps: int = 220, speed: float = 10.0,
             timeout: float = 240.0) -> int:
    from stepwatch.commands.alerts import follow_alerts
    from stepwatch.producers.publisher import EventPublisher
    from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault
    from stepwatch.topics import ensure_topics

    broker = None
    workdir = Path(tempfile.mkdtemp(prefix="stepwatch-demo-"))
    worker = None
    log = None
    ok = False
    try:
        if not settings.kafka.bootstrap:
            from stepwatch.localkafka import LocalKafka, ensure_jars, kafka_version

            _say("no KAFKA_BOOTSTRAP set: starting a local Apache Kafka broker (jars fetched with Maven once)")
            libs = ensure_jars(quiet=False)
            broker = LocalKafka(log_file=workdir / "kafka.log").start()
            _say(f"Kafka {kafka_version(libs)} (KRaft, single node) is up at {broker.bootstrap}")
            bootstrap = broker.bootstrap
        else:
            bootstrap = settings.kafka.bootstrap
            _say(f"using the Kafka cluster at {bootstrap}")
        # Fresh topic names and consumer group, so an earlier demo's alerts don't show up.
        run_id = uuid.uuid4().hex[:8]
        kafka = dataclasses.replace(settings.kafka, bootstrap=bootstrap, topic_prefix=f"stepwatch-demo-{run_id}.",
                                    app_id=f"stepwatch-demo-{run_id}")
        settings = dataclasses.replace(settings, kafka=kafka)
        from stepwatch.security import client_config

        security = client_config(settings)
        ensure_topics(kafka, client_config=security)

        env = dict(os.environ, KAFKA_BOOTSTRAP=bootstrap, STEPWATCH_KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
                   STEPWATCH_KAFKA_APP_ID=kafka.app_id, STEPWATCH_WORKER_DATADIR=str(workdir / "faust"),
                   STEPWATCH_WORKER_WEB_PORT="0", PYTHONUNBUFFERED="1")
        log_path = workdir / "worker.log"
        _say(f"starting the stepwatch worker (log: {log_path})")
        log = open(log_path, "w")
        worker = subprocess.Popen([sys.executable, "-m", "stepwatch.cli", "worker"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
        _wait_for_worker(worker, log_path, timeout=90)
        _say("worker is consuming")

        straggler = min(17, ranks - 1)
        start, end = min(60, steps // 4), min(60, steps // 4) + max(steps // 3, 30)
        spec = SimulationSpec(job="demo-job", ranks=ranks, steps=steps, start_time=time.time(),
                              stragglers=(StragglerFault(rank=straggler, start_step=start, factor=1.3,
                                                         end_step=end),))
        _say(f"simulating job 'demo-job': {ranks} ranks on {ranks // spec.ranks_per_node or 1} nodes, {steps} "
             f"steps of ~1 s at {speed:g}x real time; rank {straggler} ({spec.node_of(straggler)}) will compute "
             f"30% slower from step {start} to step {end}")

        stop = threading.Event()

        def simulate() -> None:
            from stepwatch.commands.simulate import _paced

            with EventPublisher(bootstrap=bootstrap, topic=kafka.topic(kafka.events_topic), **security) as publisher:
                for i, (_, batch) in enumerate(_paced(ClusterSimulator(spec).steps(), speed)):
                    if stop.is_set():
                        return
                    publisher.send(spec.job, batch)
                    if i and i % 50 == 0:
                        _say(f"simulator at step {i}")
            _say("simulated job finished")

        sim_thread = threading.Thread(target=simulate, name="simulator", daemon=True)
        sim_thread.start()
        _say(f"alerts from topic {kafka.topic(kafka.alerts_topic)} (times are the simulated clock, "
             f"{speed:g}x real time):")
        seen_resolved = False
        # Stops at the resolution, or after `timeout` seconds without any new alert.
        for alert in follow_alerts(settings, from_beginning=True, timeout=timeout):
            print(format_alert(alert), flush=True)
            if alert.get("status") == "firing":
                ev = alert.get("evidence", {})
                print(f"    evidence: signal={ev.get('signal')} rank median={ev.get('rank_median')} s, "
                      f"peer median={ev.get('peer_median')} s, ratio={ev.get('ratio')}, robust z={ev.get('robust_z')}, "
                      f"first slow step={ev.get('first_step')}", flush=True)
            if alert.get("status") == "resolved":
                seen_resolved = True
                break
        stop.set()
        sim_thread.join(timeout=30)
        if seen_resolved:
            _say("done: the straggler was flagged and then resolved")
            ok = True
            return 0
        _say(f"no resolved alert within {timeout:g} s; worker log: {log_path}")
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if worker is not None and worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
        if broker is not None:
            broker.stop()
            _say("local broker stopped")
        if log is not None:
            log.close()
        # The broker's and worker's data and logs: gone after a good run, kept (and named) after a bad one.
        if ok:
            try:
                shutil.rmtree(workdir)
            except OSError as exc:
                _say(f"could not remove {workdir}: {exc}")
        else:
            _say(f"logs kept in {workdir} (remove it when done)")


def _wait_for_worker(proc: subprocess.Popen, log_path: Path, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"stepwatch demo: the worker exited early:\n{log_path.read_text()[-3000:]}")
        if "Worker]: Ready" in log_path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise SystemExit(f"stepwatch demo: the worker was not ready after {timeout:g} s (log: {log_path})")
