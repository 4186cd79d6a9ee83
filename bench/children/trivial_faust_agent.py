"""A trivial default Faust agent that counts raw messages: the baseline of bench/consumers_bench.py.

    python -m bench.children.trivial_faust_agent BOOTSTRAP TOPIC TARGET_MESSAGES OUT_JSON

Reads TOPIC from the start; once it has seen TARGET_MESSAGES, writes ``{"messages", "seconds"}`` (clock
from the first message on, which is not counted) to OUT_JSON and stops itself.
"""

import json
import os
import signal
import sys
import time

import faust


def main() -> None:
    bootstrap, topic, target, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    app = faust.App("trivial-" + os.path.basename(out), broker="kafka://" + bootstrap, value_serializer="raw",
                    web_enabled=False, datadir=out + ".faust", consumer_auto_offset_reset="earliest",
                    topic_disable_leader=True)
    src = app.topic(topic, value_serializer="raw")
    state = {"n": 0, "first": None}

    @app.agent(src)
    async def count(stream):
        async for value in stream:
            if state["first"] is None:
                state["first"] = time.perf_counter()
            state["n"] += 1
            if state["n"] >= target:
                with open(out, "w") as f:
                    json.dump({"messages": state["n"] - 1, "seconds": time.perf_counter() - state["first"]}, f)
                os.kill(os.getpid(), signal.SIGTERM)

    from faust.worker import Worker
    Worker(app, loglevel="warning", quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main()
