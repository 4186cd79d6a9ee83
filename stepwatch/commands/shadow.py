"""``stepwatch config set/unset --shadow`` and ``config promote-shadow``: candidate settings on the config topic.

The candidate is one config message under its own key (models/shadow.py ``SHADOW_KEY``), for every job: values
are checked exactly as a live ``config set`` checks them, on top of the live ``*`` settings (so what promote would
write is usable). ``promote-shadow`` writes the live ``*`` scope with the candidate merged in, then drops the
candidate: the workers apply both within seconds, in the topic's one order.
"""

from __future__ import annotations

import argparse

from stepwatch.config import Settings


def take_shadow(scopes: dict) -> dict:
    """The candidate out of ``read_topic``'s scopes (removed from them), as overrides; {} if none."""
    from stepwatch.models.shadow import SHADOW_KEY

    return scopes.pop(SHADOW_KEY, None) or {}


def _values(overrides: dict) -> str:
    return ", ".join(f"{sec}.{k}={v}" for sec, kv in overrides.items() for k, v in sorted(kv.items()))


def run_shadow(args: argparse.Namespace, settings: Settings) -> int:
    from stepwatch.models import shadow as candidate
    from stepwatch.runtime_config import GLOBAL, parse_assignments, read_topic, validate_all, write_topic

    scopes = read_topic(settings)
    current = take_shadow(scopes)
    live = scopes.get(GLOBAL, {})
    key = candidate.SHADOW_KEY
    if args.config_command == "promote-shadow":
        if not current:
            raise ValueError("no shadow settings to promote (set them with 'config set --shadow')")
        merged = candidate.merged(live, current)
        validate_all(merged, settings)
        write_topic(settings, GLOBAL, merged)  # the live scope first: no moment without either
        _write(settings, key, None)
        print(f"stepwatch config: all jobs: {_values(merged)} (promoted from the shadow; the shadow is cleared)")
        return 0
    if args.config_command == "set":
        changed = {sec: dict(current.get(sec, {})) for sec in set(current) | set(parse_assignments(args.assignments))}
        for sec, kv in parse_assignments(args.assignments).items():
            changed[sec].update(kv)
    else:  # unset
        changed = {sec: dict(kv) for sec, kv in current.items()}
        for name in args.names:
            sec, dot, field = name.rpartition(".")
            changed.get(sec if dot else "straggler", {}).pop(field, None)
        if not args.names:
            changed = {}
    changed = {sec: kv for sec, kv in changed.items() if kv}
    if changed:
        validate_all(candidate.merged(live, changed), settings)  # what promote would write must be usable
    _write(settings, key, changed or None)
    if changed:
        same = not candidate.differing_sections(settings, live, changed)
        print(f"stepwatch config: shadow {candidate.identity(changed)}: {_values(changed)} (workers try it within "
              f"seconds; alerts on the shadow-alerts topic only)" + (" - note: the same as the live settings, no "
                                                                     "rule is under trial" if same else ""))
    else:
        print("stepwatch config: no shadow settings (the trial stopped)")
    return 0


def _write(settings: Settings, key: str, overrides: dict | None) -> None:
    """The candidate's message (marked as shadow) or its tombstone on the config topic."""
    from kafka import KafkaProducer

    from stepwatch.models import shadow as candidate
    from stepwatch.security import client_config
    from stepwatch.topics import ensure_config_topic

    security = client_config(settings)
    ensure_config_topic(settings.kafka, client_config=security)
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all", **security)
    try:
        producer.send(settings.kafka.topic(settings.kafka.config_topic), key=key.encode(),
                      value=candidate.encode(overrides)).get(timeout=30)
    finally:
        producer.close()
