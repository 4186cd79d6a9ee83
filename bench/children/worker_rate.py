"""A stepwatch worker that stops once it has processed a target number of events (bench/consumers_bench.py).

    python -m bench.children.worker_rate BOOTSTRAP PREFIX TARGET_EVENTS OUT_JSON

Runs the worker as `stepwatch worker` does (events consumer from ``STEPWATCH_WORKER_CONSUMER``) on the
topics of PREFIX; writes ``{"events", "seconds", "cpu_seconds"}`` to OUT_JSON, counted from the first processed batch on
(``cpu_seconds``: the main thread's, where the consumer, the pipeline and the timers run; ``cpu_all_seconds``:
every thread's and the decoder process's), then stops itself.
"""

import json
import os
import signal
import sys
import time


def main() -> None:
    from stepwatch.config import Settings
    from stepwatch.recording import tune_gc
    from stepwatch.streams.app import create_app
    from stepwatch.topics import ensure_topics
    bootstrap, prefix, target, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    # An app id (consumer groups) of its own per consumer mode: the aiokafka consumer would otherwise start
    # where the Faust agent's group left the topic (its upgrade path), i.e. at the end.
    mode = os.environ.get("STEPWATCH_WORKER_CONSUMER", "default")
    os.environ.update(KAFKA_BOOTSTRAP=bootstrap, STEPWATCH_KAFKA_TOPIC_PREFIX=prefix, STEPWATCH_KAFKA_PARTITIONS="1",
                      STEPWATCH_KAFKA_APP_ID=prefix + "stepwatch-" + mode, STEPWATCH_WORKER_WEB_PORT="0",
                      STEPWATCH_WORKER_DATADIR=out + ".faust")
    settings = Settings.from_env()
    tune_gc()  # the collector's setting `stepwatch worker` runs with (stepwatch/commands/worker.py)
    ensure_topics(settings.kafka)  # as `stepwatch worker` does (the events topic exists already)
    app = create_app(settings)
    worker = app.stepwatch_worker
    engine = worker.engine
    state = {"first": None}

    def all_cpu() -> float:
        """CPU seconds of this process (every thread) and of its decoder process (streams/decoder.py)."""
        pool = getattr(getattr(worker, "decoder", None), "_pool", None)  # (older trees have none)
        ticks = 0
        for pid in list(getattr(pool, "_processes", None) or ()):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
            except OSError:
                pass
        return time.process_time() + ticks / os.sysconf("SC_CLK_TCK")

    @app.timer(interval=0.02)
    async def watch():
        n = sum(engine.events_by_kind.values())
        if n and state["first"] is None:
            state["first"] = (time.perf_counter(), n, time.thread_time(), all_cpu())
        if n >= target:
            t0, n0, cpu0, all0 = state["first"]
            dt, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
            with open(out, "w") as f:
                json.dump({"events": n - n0, "seconds": dt, "cpu_seconds": cpu, "cpu_all_seconds": all_cpu() - all0},
                          f)
            os.kill(os.getpid(), signal.SIGTERM)

    from faust.worker import Worker
    Worker(app, loglevel="warning", quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main()
