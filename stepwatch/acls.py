"""The trust model as data: which principal may write and read which topic (docs/security.md).

Five kinds of Kafka principal touch stepwatch's topics. Training processes run user code, so they
may write only their own events (stack answers travel there too) and read the control topic; node
agents write only telemetry (Xid, link state: the telemetry that can drain a node); workers write
what they derive (alerts, dead letters, the workers registry, ledger, placement, link baselines,
actions, stack requests on the control topic, the shard stage's job events) and read everything;
operators (the SREs) write runtime settings (config), verdicts on alerts (feedback) and may send control
requests; a worker writes to the feedback topic only the verdicts its token-guarded web port takes. One
table drives both the ``kafka-acls`` commands printed in docs/security.md (``kafka_acls_commands``) and the bindings the
tests apply to a real broker with an authorizer (``acl_bindings``, kafka-python's admin client
sends the same CreateAcls request as ``kafka-acls --add``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from stepwatch.config import Settings
from stepwatch.models.oncall.drain_ledger import TOPIC as DRAIN_LEDGER_TOPIC


class Role(enum.Enum):
    TRAINING = "training"
    AGENT = "agent"
    WORKER = "worker"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Grant:
    """``operations`` on the topic ``name`` (a full name; ``prefixed``: every topic starting with it)."""

    name: str
    operations: tuple[str, ...]
    prefixed: bool = False
    resource: str = "topic"  # or "group"


WRITE = ("Write", "Describe")
READ = ("Read", "Describe")


def grants(settings: Settings | None = None) -> dict[Role, tuple[Grant, ...]]:
    """What each role may do, for the topics of ``settings`` (default: the defaults)."""
    s = settings or Settings()
    k = s.kafka
    topic = k.topic
    events, control = topic(k.events_topic), topic(k.control_topic)
    worker_writes = [topic(k.alerts_topic), topic(k.deadletter_topic), topic(k.workers_topic),
                     topic(k.shadow_alerts_topic),  # candidate settings' alerts (streams/shadow.py)
                     topic(s.oncall.ledger_topic), topic(s.oncall.placement_topic), topic(k.link_baselines_topic),
                     topic(s.oncall.actions_topic), control, topic(k.job_events_topic),
                     topic(k.feedback_topic),  # the verdicts the web port takes (POST /alerts/<id>/feedback)
                     topic(DRAIN_LEDGER_TOPIC)]  # one drain budget across workers (streams/drain_ledger.py)
    return {
        Role.TRAINING: (Grant(events, WRITE), Grant(control, READ)),
        Role.AGENT: (Grant(topic(s.telemetry.topic), WRITE),),
        Role.WORKER: (*(Grant(name, WRITE) for name in worker_writes),
                      Grant(k.topic_prefix, ("Read", "Describe", "Create", "DescribeConfigs"), prefixed=True),
                      Grant(k.app_id + "-", ("All",), prefixed=True),  # Faust's own topics (<app_id>-...)
                      Grant(k.app_id, ("Read", "Describe"), prefixed=True, resource="group")),
        Role.OPERATOR: (Grant(topic(k.config_topic), WRITE), Grant(control, WRITE),
                        Grant(topic(s.oncall.releases_topic), WRITE),  # stepwatch actions release
                        Grant(topic(k.feedback_topic), WRITE),  # stepwatch feedback: verdicts on alerts
                        Grant(k.topic_prefix, READ, prefixed=True)),
    }


def kafka_acls_commands(principals: dict[Role, str], settings: Settings | None = None) -> list[str]:
    """The ``kafka-acls --add`` commands that enforce the table (``principals``: role -> ``User:name``)."""
    out = []
    for role, role_grants in grants(settings).items():
        for g in role_grants:
            ops = " ".join(f"--operation {op}" for op in g.operations)
            pattern = " --resource-pattern-type prefixed" if g.prefixed else ""
            out.append(f"kafka-acls --bootstrap-server $BOOTSTRAP --command-config admin.properties --add "
                       f"--allow-principal {principals[role]} {ops} --{g.resource} {g.name}{pattern}")
    return out


def acl_bindings(principals: dict[Role, str], settings: Settings | None = None) -> list:
    """The same table as kafka-python ``ACL`` objects (for ``KafkaAdminClient.create_acls``)."""
    from kafka.admin import (ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern,
                             ResourceType)

    out = []
    for role, role_grants in grants(settings).items():
        for g in role_grants:
            kind = ResourceType.TOPIC if g.resource == "topic" else ResourceType.GROUP
            pattern = ResourcePattern(kind, g.name, ACLResourcePatternType.PREFIXED if g.prefixed
                                      else ACLResourcePatternType.LITERAL)
            for op in g.operations:
                name = {"DescribeConfigs": "DESCRIBE_CONFIGS"}.get(op, op.upper())
                out.append(ACL(principals[role], "*", ACLOperation[name], ACLPermissionType.ALLOW, pattern))
    return out
