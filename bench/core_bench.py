"""(a) Core: events/s through ``decode_message`` + ``DetectionEngine.process``, single-event messages vs batch
envelopes of 256 events, decode alone, and the worker's column-wise path; and the hot spots of that path."""

from __future__ import annotations

import time
from pathlib import Path

from bench.common import BATCH, encode, sim_events


def core(ranks: int = 1024, steps: int = 40, rounds: int = 2) -> dict:
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.wire.events import decode_message
    from stepwatch.models.wire.step_columns import decode_message_columns

    events = sim_events(ranks, steps)
    single = encode(events, 1)
    batched = encode(events, BATCH)
    n = len(events)

    def decode_only(msgs):
        t = time.perf_counter()
        k = 0
        for m in msgs:
            k += len(decode_message(m)[0])
        assert k == n
        return n / (time.perf_counter() - t)

    def full(msgs):
        engine = DetectionEngine()
        t = time.perf_counter()
        for m in msgs:
            for ev in decode_message(m)[0]:
                engine.process(ev)
        return n / (time.perf_counter() - t)

    def decode_columns(msgs):
        t = time.perf_counter()
        for m in msgs:
            decode_message_columns(m)
        return n / (time.perf_counter() - t)

    def full_columns(msgs):  # what the worker does: columns for plain step envelopes, one call per message
        engine = DetectionEngine()
        t = time.perf_counter()
        for m in msgs:
            engine.process_batch(decode_message_columns(m)[0])
        return n / (time.perf_counter() - t)

    out = {"events": n, "ranks": ranks, "steps": steps}
    for name, fn, msgs in (("decode_single", decode_only, single), ("decode_batched", decode_only, batched),
                           ("full_single", full, single), ("full_batched", full, batched),
                           ("decode_columns", decode_columns, batched), ("full_columns", full_columns, batched)):
        out[name] = max(fn(msgs) for _ in range(rounds))
    return out


def profile(ranks: int = 1024, steps: int = 30, top: int = 8) -> list[tuple[str, float]]:
    """Own-time share of the hottest functions on the batched core path, as the worker runs it (cProfile)."""
    import cProfile
    import pstats

    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.wire.step_columns import decode_message_columns

    msgs = encode(sim_events(ranks, steps), BATCH)
    engine = DetectionEngine()
    prof = cProfile.Profile()
    prof.enable()
    for m in msgs:
        engine.process_batch(decode_message_columns(m)[0])
    prof.disable()
    st = pstats.Stats(prof)
    total = sum(v[2] for v in st.stats.values())
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]
    out = []
    for (file, line, fn), v in rows:
        where = f"{Path(file).parent.name}/{Path(file).name}:{fn}" if file != "~" else fn
        out.append((where, v[2] / total))
    return out
