"""A stepwatch worker that reports its progress in a file (bench/common.py: ``Workers``).

    python -m bench.children.worker_progress BOOTSTRAP PREFIX PARTITIONS OUT_JSON

Runs the worker on the topics of PREFIX (events topic of PARTITIONS partitions, consumer group of the
prefix: start several to share it); every 20 ms that something changed, rewrites OUT_JSON with the events
processed so far, the events partitions it owns, and the wall and CPU time of the first and of the last
change of the count. The parent stops it.
"""

import json
import os
import sys
import time


def main() -> None:
    from stepwatch.config import Settings
    from stepwatch.recording import tune_gc
    from stepwatch.streams.app import create_app
    bootstrap, prefix, partitions, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    os.environ.update(KAFKA_BOOTSTRAP=bootstrap, STEPWATCH_KAFKA_TOPIC_PREFIX=prefix,
                      STEPWATCH_KAFKA_PARTITIONS=partitions, STEPWATCH_KAFKA_APP_ID=prefix + "stepwatch",
                      STEPWATCH_WORKER_WEB_PORT="0", STEPWATCH_WORKER_DATADIR=out + ".faust")
    tune_gc()  # the collector's setting `stepwatch worker` runs with (stepwatch/commands/worker.py)
    app = create_app(Settings.from_env())
    engine = app.stepwatch_worker.engine
    events_topic = prefix + "events"
    state = {"first": None, "last": None, "n": -1}

    @app.timer(interval=0.02)
    async def watch():  # progress for the parent: events seen, first and last time the count moved
        n = sum(engine.events_by_kind.values())
        owned = app.stepwatch_worker.owned_events_partitions()  # either consumer mode's (None: not known yet)
        assigned = sorted(owned) if owned is not None else sorted(tp.partition for tp in app.consumer.assignment()
                                                                  if tp.topic == events_topic)
        if n != state["n"] or assigned != state.get("assigned"):
            now = time.time()
            if n > 0 and state["first"] is None:
                # The first count is seen after its batch was processed: rates leave those events out.
                state["first"], state["n_first"] = now, n
                state["cpu_first"] = time.process_time()
            if n != state["n"]:
                state["last"] = now
                state["cpu_last"] = time.process_time()
            state["n"], state["assigned"] = n, assigned
            with open(out + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(out + ".tmp", out)

    from faust.worker import Worker
    Worker(app, loglevel="warning", quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main()
