"""Creating stepwatch's topics with the configured partition count (idempotent)."""

from __future__ import annotations

from collections.abc import Iterable

from stepwatch.config import KafkaSettings

#: The config of topics that producers on training hosts and node agents write (events, telemetry; the shard
#: stage's input and output): each record takes the broker's time (``LogAppendTime``), not the producer host's
#: (``CreateTime``, Kafka's default). ``stepwatch record`` writes that time as a line's ``_arrival`` and recovery
#: rebuilds on it; on a producer's clock a host running minutes off would move them, and replay would not see
#: the arrivals the live worker saw (it reads on its own clock when records reach it).
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def topic_names(kafka: KafkaSettings) -> list[str]:
    return [kafka.topic(kafka.events_topic), kafka.topic(kafka.alerts_topic), kafka.topic(kafka.deadletter_topic),
            kafka.topic(kafka.control_topic), kafka.topic(kafka.shadow_alerts_topic)]


def ensure_topics(kafka: KafkaSettings, *, timeout: float = 30, client_config: dict | None = None) -> None:
    """Create the events, alerts, dead-letter, control, shadow-alerts, config, workers and feedback topics if they do not exist yet.

    ``client_config``: kafka-python connection settings (TLS/SASL, see stepwatch.security).
    """
    create_topics(kafka.bootstrap, topic_names(kafka), kafka.partitions,
                  replication_factor=kafka.replication_factor, timeout=timeout, client_config=client_config,
                  append_time=[kafka.topic(kafka.events_topic)])
    ensure_config_topic(kafka, timeout=timeout, client_config=client_config)
    ensure_workers_topic(kafka, timeout=timeout, client_config=client_config)
    ensure_feedback_topic(kafka, timeout=timeout, client_config=client_config)


def ensure_feedback_topic(kafka: KafkaSettings, *, timeout: float = 30, client_config: dict | None = None) -> None:
    """Verdicts on alerts (stepwatch/feedback.py): compacted, keyed by alert id (the latest verdict counts)."""
    create_topics(kafka.bootstrap, [], kafka.partitions, replication_factor=kafka.replication_factor,
                  compacted=[kafka.topic(kafka.feedback_topic)], timeout=timeout, client_config=client_config)


def ensure_workers_topic(kafka: KafkaSettings, *, timeout: float = 30, client_config: dict | None = None) -> None:
    """The workers registry (streams/registry.py): one partition, compacted (latest word per worker URL)."""
    create_topics(kafka.bootstrap, [], 1, replication_factor=kafka.replication_factor,
                  compacted=[kafka.topic(kafka.workers_topic)], timeout=timeout, client_config=client_config)


def ensure_link_baselines_topic(kafka: KafkaSettings, *, timeout: float = 30,
                                client_config: dict | None = None) -> None:
    """Persistent link baselines (streams/link_baselines.py): compacted, keyed by node."""
    create_topics(kafka.bootstrap, [], kafka.partitions, replication_factor=kafka.replication_factor,
                  compacted=[kafka.topic(kafka.link_baselines_topic)], timeout=timeout, client_config=client_config)


def ensure_config_topic(kafka: KafkaSettings, *, timeout: float = 30, client_config: dict | None = None) -> None:
    """The runtime-settings topic: one partition (one order), compacted (latest value per key)."""
    create_topics(kafka.bootstrap, [], 1, replication_factor=kafka.replication_factor,
                  compacted=[kafka.topic(kafka.config_topic)], timeout=timeout, client_config=client_config)


def create_topics(
    bootstrap: str,
    names: Iterable[str],
    partitions: int = 1,
    *,
    replication_factor: int = 1,
    compacted: Iterable[str] = (),
    timeout: float = 30,
    client_config: dict | None = None,
    append_time: Iterable[str] = (),
) -> None:
    """Create topics; existing topics are left as they are.

    Names in ``compacted`` get ``cleanup.policy=compact``, names in ``append_time`` the broker's time on each
    record (``APPEND_TIME``). Returns once every partition has a leader, so producers can write at once.
    """
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    names = list(dict.fromkeys(names))
    compacted, append_time = set(compacted), set(append_time)
    names += [n for n in compacted if n not in names]
    if not names:
        return

    def configs(name: str) -> dict[str, str]:
        return {**({"cleanup.policy": "compact"} if name in compacted else {}),
                **(APPEND_TIME if name in append_time else {})}

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="stepwatch-create-topics",
                             **(client_config or {}))
    try:
        if hasattr(admin, "wait_for_topics"):  # kafka-python >= 3
            spec = {
                n: {"num_partitions": partitions, "replication_factor": replication_factor, "configs": configs(n)}
                for n in names
            }
            result = admin.create_topics(spec, timeout_ms=int(timeout * 1000), raise_errors=False)
            for topic in result.get("topics", []):
                code = topic.get("error_code", 0)
                if code not in (0, TopicAlreadyExistsError.errno):
                    raise RuntimeError(f"creating topic {topic.get('name')!r} failed: {topic}")
            admin.wait_for_topics(names, timeout_ms=int(timeout * 1000))
        else:  # kafka-python 2.x
            for n in names:
                try:
                    admin.create_topics(
                        [NewTopic(n, partitions, replication_factor, topic_configs=configs(n))],
                        timeout_ms=int(timeout * 1000),
                    )
                except TopicAlreadyExistsError:
                    pass
    finally:
        admin.close()
