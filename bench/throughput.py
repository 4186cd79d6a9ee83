"""Throughput and scale of one worker, measured side by side on this machine.

    .venv/bin/python bench/throughput.py                 # all parts, table into BENCHMARKS.md
    .venv/bin/python bench/throughput.py --skip-kafka    # core and memory only (no JVM)

(a) core: events/s through ``decode_message`` + ``DetectionEngine.process``, single-event
    messages vs batch envelopes of 256 events, and decode alone, on the same simulated job;
(b) end to end through a real local broker (``stepwatch.localkafka.LocalKafka``): the stepwatch
    worker (``streams.worker.Worker``) with each events consumer (``STEPWATCH_WORKER_CONSUMER``:
    the Faust agent, ``faust``, and its own aiokafka consumer, ``aiokafka``) vs a bare aiokafka
    consumer that only reads and decodes the same messages, for batch envelopes and single-event
    messages, and a trivial default Faust agent (counts raw messages) on the same messages;
(c) memory per tracked rank and CPU per event for jobs of 1k, 4k and 16k ranks (RSS and
    tracemalloc in a fresh process per size);
(d) alert latency, (e) two workers of one group vs one, (f) one large job through the shard stage,
    on the same broker as (b).

This file runs the parts and writes the report; each part is a module of its own (bench/core_bench.py,
consumers_bench.py, memory_bench.py, latency_bench.py, scale_bench.py, large_job_bench.py; shared
helpers in bench/common.py) and the programs they start in processes of their own are in bench/children/.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run by path: the parts import one another as bench.*

from bench.common import BATCH  # noqa: E402
from bench.consumers_bench import consumers  # noqa: E402
from bench.core_bench import core, profile  # noqa: E402
from bench.large_job_bench import large_job  # noqa: E402
from bench.latency_bench import latency  # noqa: E402
from bench.memory_bench import memory  # noqa: E402
from bench.scale_bench import scale  # noqa: E402


def kafka(single_events: int = 100_000, batched_events: int = 400_000) -> dict:
    """Parts (b), (d), (e) and (f), on one local broker started for them."""
    from stepwatch.localkafka import LocalKafka

    results: dict = {}
    # The first rebalance of a group waits a little, so that two workers started together share it.
    with tempfile.TemporaryDirectory(prefix="stepwatch-tput-") as tmp, LocalKafka(
            heap="768m", extra_config={"group.initial.rebalance.delay.ms": 3000}) as broker:
        tmpd = Path(tmp)
        bootstrap = broker.bootstrap
        results.update(consumers(bootstrap, tmpd, single_events, batched_events))
        results["latency"] = latency(bootstrap, tmpd)
        results["latency_aiokafka"] = latency(bootstrap, tmpd, consumer="aiokafka")
        results["scale"] = scale(bootstrap, tmpd)
        results["large_job"] = large_job(bootstrap, tmpd)
    return results


# -- report ------------------------------------------------------------------------------------------


def markdown(core_r: dict | None, kafka_r: dict | None, mem_r: list | None, command: str,
             prof: list | None = None) -> str:
    from bench._report import stamp

    k = lambda x: f"{x / 1000:,.0f}k" if x >= 10_000 else f"{x:,.0f}"  # noqa: E731
    lines = ["## Throughput and scale (`bench/throughput.py`)", "", stamp(command).rstrip(), ""]
    if core_r:
        c = core_r
        lines += [f"### (a) Core: decode + detection in one process ({c['ranks']}-rank job, {c['events']:,} step "
                  f"events, best of 2)", "",
                  "| path | single-event messages | batch envelopes (256 events) | batched / single |",
                  "|---|---:|---:|---:|",
                  f"| decode only (`decode_message`) | {k(c['decode_single'])} ev/s | {k(c['decode_batched'])} ev/s | "
                  f"{c['decode_batched'] / c['decode_single']:.2f}x |",
                  f"| decode + `DetectionEngine.process` | {k(c['full_single'])} ev/s | {k(c['full_batched'])} ev/s | "
                  f"{c['full_batched'] / c['full_single']:.2f}x |",
                  f"| detection share of the batched path | | {1 - c['full_batched'] / c['decode_batched']:.0%} "
                  f"of the time | |",
                  f"| worker's path: `decode_message_columns` + `process_batch` | | {k(c['full_columns'])} ev/s "
                  f"(decode alone {k(c['decode_columns'])}) | **{c['full_columns'] / c['full_batched']:.2f}x** "
                  f"the per-event path |", ""]
    if kafka_r:
        b, s = kafka_r["batched"], kafka_r["single"]
        lines += ["### (b) End to end through a local Kafka broker, one worker process", "",
                  "Clocks start at the first message each consumer sees (startup and group join excluded); "
                  "all consumers read the same messages from one partition, one after another.", "",
                  "| consumer | batch envelopes (256 ev/msg) | single-event messages |", "|---|---:|---:|",
                  f"| bare aiokafka consumer, read + decode as the worker does (`decode_message_columns`) | "
                  f"{k(b['bare_events_s'])} ev/s | "
                  f"{k(s['bare_events_s'])} ev/s |",
                  f"| stepwatch worker, Faust agent (`STEPWATCH_WORKER_CONSUMER=faust`; full detection) | "
                  f"{k(b['stepwatch_events_s'])} ev/s | {k(s['stepwatch_events_s'])} ev/s |",
                  f"| stepwatch worker, own aiokafka consumer (`STEPWATCH_WORKER_CONSUMER=aiokafka`, default; full "
                  f"detection) | {k(b['stepwatch_aiokafka_events_s'])} ev/s | "
                  f"{k(s['stepwatch_aiokafka_events_s'])} ev/s |",
                  f"| trivial default Faust agent (counts raw messages) | {k(b['trivial_events_s'])} ev/s | "
                  f"{k(s['trivial_messages_s'])} ev/s |",
                  f"| stepwatch (faust) / bare | {b['stepwatch_events_s'] / b['bare_events_s']:.2f} | "
                  f"{s['stepwatch_events_s'] / s['bare_events_s']:.2f} |",
                  f"| **stepwatch (aiokafka) / bare** (target >= 0.5 batched) | "
                  f"**{b['stepwatch_aiokafka_events_s'] / b['bare_events_s']:.2f}** | "
                  f"**{s['stepwatch_aiokafka_events_s'] / s['bare_events_s']:.2f}** |",
                  f"| stepwatch (faust) / trivial Faust | {b['stepwatch_events_s'] / b['trivial_events_s']:.2f} | "
                  f"{s['stepwatch_events_s'] / s['trivial_messages_s']:.2f} |",
                  f"| **stepwatch (aiokafka) / trivial Faust** (target >= 3 single) | "
                  f"{b['stepwatch_aiokafka_events_s'] / b['trivial_events_s']:.2f} | "
                  f"**{s['stepwatch_aiokafka_events_s'] / s['trivial_messages_s']:.2f}** |",
                  f"| stepwatch aiokafka / faust | {b['stepwatch_aiokafka_events_s'] / b['stepwatch_events_s']:.2f}x | "
                  f"{s['stepwatch_aiokafka_events_s'] / s['stepwatch_events_s']:.2f}x |",
                  f"| messages / events | {b['messages']:,} / {b['events']:,} | {s['messages']:,} / {s['events']:,} |",
                  ""]
        lat, sc = kafka_r.get("latency"), kafka_r.get("scale")
        if lat:
            ms = lambda x: "-" if x is None else f"{1000 * x:,.0f} ms"  # noqa: E731
            lines += ["### (d) Alert latency through the broker and one worker", "",
                      f"{lat['jobs']} live jobs of {lat['ranks']} ranks, one batch envelope per job and step every "
                      f"{lat['period']:g} s ({k(lat['events_s'])} events/s), one straggler (1.5x compute) per job "
                      "from a step of its own. Latency: from sending the envelope of the step the alert names as "
                      "`detected_step` (the event that makes the rule true) to the alert's arrival at a consumer "
                      "of the alerts topic.", "",
                      "| events consumer | alerts measured | p50 | p99 | max |", "|---|---:|---:|---:|---:|"]
            for one in (lat, kafka_r.get("latency_aiokafka")):
                if one:
                    lines.append(f"| {one.get('consumer', 'faust')} | {one['alerts']} / {one['jobs']} | "
                                 f"{ms(one['p50'])} | {ms(one['p99'])} | {ms(one['max'])} |")
            lines.append("")
        if sc:
            lines += ["### (e) Two workers on one machine, one consumer group, events topic of 2 partitions", "",
                      f"{sc['jobs']} jobs of {sc['ranks']} ranks keyed by job ({sc['events']:,} events in "
                      f"{sc['messages']:,} envelopes of {BATCH}, half of the jobs on each partition), on the topic "
                      "before the workers start; clock from the first event any worker processes to the last. The "
                      "workers and the broker share the machine's cores.", "",
                      "| workers | events/s (all workers) | events per worker | vs one worker |", "|---:|---:|---|---:|",
                      f"| 1 | {k(sc['w1_events_s'])} | {', '.join(f'{x:,}' for x in sc['w1_split'])} | 1.00x |",
                      f"| 2 | {k(sc['w2_events_s'])} | {', '.join(f'{x:,}' for x in sc['w2_split'])} | "
                      f"**{sc['w2_events_s'] / sc['w1_events_s']:.2f}x** |", ""]
        lj = kafka_r.get("large_job")
        if lj:
            us = lambda x: f"{x:.1f} us"  # noqa: E731
            shard_cpu = sum(lj["shard_cpu_us"])
            lines += ["### (f) One large job over several processes: the shard stage", "",
                      f"One job of {lj['ranks']:,} ranks, {lj['steps']} steps, **single-event messages** "
                      f"({lj['events']:,}) keyed by rank shard (`job/<rank // {lj['shard_ranks']}>`) onto a raw "
                      f"events topic of {lj['partitions']} partitions, on the topic before the consumers start. "
                      "A worker reads them all (each consumer mode), or two `stepwatch shard` processes re-batch "
                      "them per job onto job-events and a worker reads that: the two stages run one after the other, "
                      "each on a full topic, so that each one's own rate shows (what one process of each stage "
                      "sustains; on separate machines a pipeline runs at the slower of N shard processes and one "
                      "job-stage worker). Worker rates: its first processed batch to its last event; shard stage: "
                      "from the processes' partition assignment to the last envelope acknowledged. CPU per event: "
                      "each process's own clock (`process_time` for workers, `/proc` for the shard processes).", "",
                      "| stage | events/s | CPU per event |", "|---|---:|---:|",
                      f"| one worker reads the single-event messages, Faust agent | {k(lj['one_faust_events_s'])} | "
                      f"{us(lj['one_faust_cpu_us'])} |",
                      f"| one worker reads the single-event messages, aiokafka consumer (default) | "
                      f"{k(lj['one_aiokafka_events_s'])} | {us(lj['one_aiokafka_cpu_us'])} |",
                      f"| shard stage: 2 `stepwatch shard` processes together "
                      f"({', '.join(f'{m:,}' for m in lj['shard_messages'])} messages each) | "
                      f"{k(lj['shard_events_s'])} | {us(shard_cpu)} "
                      f"({' + '.join(us(c) for c in lj['shard_cpu_us'])}) |",
                      f"| job stage: one worker reads the shard stage's envelopes (aiokafka consumer) | "
                      f"**{k(lj['staged_events_s'])}** | **{us(lj['staged_worker_cpu_us'])}** |",
                      f"| job stage / one worker on single-event messages (aiokafka) | "
                      f"**{lj['staged_events_s'] / lj['one_aiokafka_events_s']:.2f}x** | "
                      f"{lj['staged_worker_cpu_us'] / lj['one_aiokafka_cpu_us']:.2f}x |", ""]
    if mem_r:
        lines += ["### (c) Memory and CPU per tracked rank (fresh process per size, 20 steps through the engine)", "",
                  "| ranks | engine memory (tracemalloc) | per rank | RSS growth | process RSS | CPU per event |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for m in mem_r:
            lines.append(f"| {m['ranks']:,} | {m['traced'] / 2**20:.1f} MiB | {m['traced'] / m['ranks'] / 1024:.1f} KiB | "
                         f"{m['rss_delta'] / 2**20:.1f} MiB | {m['rss_total'] / 2**20:.0f} MiB | "
                         f"{m['cpu_per_event_us']:.1f} us |")
        big = mem_r[-1]
        lines += ["", f"At {big['ranks']:,} ranks and one step per second the engine needs "
                      f"{big['ranks'] * big['cpu_per_event_us'] / 1e6:.2f} CPU-seconds per second of events "
                      f"(core only, no Kafka); RSS of the whole process {big['rss_total'] / 2**20:.0f} MiB."]
    if prof:
        lines += ["", "### Hot spots (cProfile, batched core path, own time)", "",
                  "| function | share |", "|---|---:|"] + [f"| `{f}` | {share:.0%} |" for f, share in prof]
    verdicts = targets(kafka_r, mem_r)
    if verdicts:
        lines += ["", verdicts]
    return "\n".join(lines) + "\n"


def targets(kafka_r: dict | None, mem_r: list | None) -> str:
    """The issue's targets, judged on this run's figures (so the verdicts always match the tables)."""
    if not kafka_r:
        return ""
    ok = lambda cond: "**met**" if cond else "**not met**"  # noqa: E731
    k = lambda x: f"{x / 1000:,.0f}k"  # noqa: E731
    b, s, lat = kafka_r["batched"], kafka_r["single"], kafka_r.get("latency_aiokafka") or kafka_r.get("latency")
    rate, bare = b["stepwatch_aiokafka_events_s"], b["bare_events_s"]
    single = s["stepwatch_aiokafka_events_s"] / s["trivial_messages_s"]
    out = ["### Against the targets", "",
           f"- Batch envelopes through the full detection path, one worker (default consumer): {k(rate)} events/s "
           f"(target 200k: {ok(rate >= 200_000)}), {rate / bare:.2f}x the bare consumer on the same messages "
           f"(target 0.5: {ok(rate >= 0.5 * bare)}). The worker decodes a plain step envelope column by column "
           "(`decode_message_columns`) and `DetectionEngine.process_batch` judges it with array operations (same "
           "alerts and state as event by event: tests/models/steps/test_batch_path.py); the Faust agent mode reaches "
           f"{b['stepwatch_events_s'] / bare:.2f}x.",
           f"- Single-event messages: {single:.1f}x a trivial default Faust agent (target 3x: {ok(single >= 3)}); "
           "the worker's own aiokafka consumer merges consecutive step messages of a partition (up to 1,024 "
           "events) into one column batch.",
           ]
    if lat:
        out.append(f"- Alert latency: p99 {1000 * lat['p99']:,.0f} ms on top of the rule's own wait (target < 1 s: "
                   f"{ok(lat['p99'] < 1.0)}).")
    sc, lj = kafka_r.get("scale"), kafka_r.get("large_job")
    if sc:
        out.append(f"- Two workers split a multi-job load by partition: {sc['w2_events_s'] / sc['w1_events_s']:.2f}x "
                   "one worker, on a machine whose 2 cores also run the broker.")
    if lj:
        out.append(f"- One large job over several processes: the shard stage takes the per-message work (the "
                   f"processes split the raw topic's partitions: {', '.join(f'{m:,}' for m in lj['shard_messages'])} "
                   f"messages), and the job's worker then runs at {k(lj['staged_events_s'])} events/s, "
                   f"{lj['staged_events_s'] / lj['one_aiokafka_events_s']:.2f}x what it sustains on the same job's "
                   "single-event messages: the job is no longer capped by one worker's per-message rate; more shard "
                   "processes (on more machines) carry more messages, up to the job stage's envelope rate.")
    if mem_r:
        big = mem_r[-1]
        out.append(f"- {big['ranks']:,} ranks at one step per second in one worker: "
                   f"{big['ranks'] * big['cpu_per_event_us'] / 1e6:.2f} CPU-s per second, "
                   f"{big['rss_total'] / 2**20:.0f} MiB RSS (target < 1 GiB: {ok(big['rss_total'] < 2**30)}).")
    return "\n".join(out)



def main(argv: list[str] | None = None) -> int:
    from bench._report import update_section

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-kafka", action="store_true", help="skip the broker part (b)")
    ap.add_argument("--skip-core", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--single-events", type=int, default=100_000, help="single-event messages in (b)")
    ap.add_argument("--batched-events", type=int, default=400_000, help="events in envelopes in (b)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    argv_list = argv if argv is not None else sys.argv[1:]
    command = ".venv/bin/python bench/throughput.py" + ("" if not argv_list else " " + " ".join(argv_list))
    core_r = None if args.skip_core else core()
    if core_r:
        print(f"core: {core_r}", file=sys.stderr)
    mem_r = None if args.skip_memory else memory()
    if mem_r:
        print(f"memory: {mem_r}", file=sys.stderr)
    prof = None if args.skip_core else profile()
    kafka_r = None if args.skip_kafka else kafka(args.single_events, args.batched_events)
    text = markdown(core_r, kafka_r, mem_r, command, prof)
    print(text)
    if not args.no_write:
        update_section("throughput", text)
        print("updated BENCHMARKS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
