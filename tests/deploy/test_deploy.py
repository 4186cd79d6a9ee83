"""The deploy package (deploy/, docs/runbooks/, the container files) checked with the real tools.

helm (built once from the Go module proxy into ``$STEPWATCH_TOOLS_CACHE/bin`` by scripts/test),
promtool and amtool (Debian's prometheus and prometheus-alertmanager packages) and a real
Alertmanager process; a missing tool skips its tests with the reason (a failure in CI). The last
test scrapes a live worker's /metrics on the real broker.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "stepwatch"
RULES = DEPLOY / "prometheus" / "stepwatch-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "stepwatch-dashboard.json"
ALERTMANAGER = DEPLOY / "alertmanager" / "alertmanager.yml"
RUNBOOKS = REPO / "docs" / "runbooks"
SLURM = DEPLOY / "slurm"
TOOLS_BIN = Path(os.environ.get("STEPWATCH_TOOLS_CACHE", Path.home() / ".cache" / "stepwatch-tools")) / "bin"


def tool(name: str, *, package: str) -> str:
    found = shutil.which(name) or (str(TOOLS_BIN / name) if (TOOLS_BIN / name).exists() else None)
    if found is None:
        pytest.skip(f"needs {name} ({package}; scripts/test installs it)")
    return found


def run(*argv: str, cwd: Path = REPO, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
    return result


# -- alert types and runbooks ---------------------------------------------------------------------

def emitted_alert_types() -> set[str]:
    """Every alert type the worker can emit: ``Alert(type="...")`` in models/, and the types the
    failure-class table classifies (it names the device rules' types, which are built from a variable)."""
    from stepwatch.models.alert_types import AlertType
    from stepwatch.models.registry import type_classes

    TYPE_CLASSES = type_classes()

    found = set()
    for path in (REPO / "models").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Alert":
                for kw in node.keywords:
                    if kw.arg == "type" and isinstance(kw.value, ast.Constant):
                        found.add(kw.value.value)
                    elif (kw.arg == "type" and isinstance(kw.value, ast.Attribute)  # type=AlertType.HANG
                          and getattr(kw.value.value, "id", None) == "AlertType"):
                        found.add(AlertType[kw.value.attr].value)
    assert {"straggler", "hang", "node_suspect", "gpu_fault"} <= found, found  # the scan itself works
    return found | set(TYPE_CLASSES)


def test_every_alert_type_has_a_runbook_with_the_four_parts():
    types = emitted_alert_types()
    assert len(types) >= 13
    for alert_type in sorted(types):
        page = RUNBOOKS / f"{alert_type}.md"
        assert page.is_file(), f"no runbook for alert type {alert_type}: {page}"
        text = page.read_text()
        assert text.startswith(f"# {alert_type}\n")
        for part in ("**What it means.**", "**How to confirm.**", "**What to do.**", "**When to escalate.**"):
            assert part in text, f"{page.name} lacks {part}"
    index = (RUNBOOKS / "README.md").read_text()
    assert all(f"[{t}.md]({t}.md)" in index for t in types)


def test_every_alert_carries_a_runbook_url_with_a_configurable_base(monkeypatch):
    from stepwatch.models.alerts import Alert
    from stepwatch.streams.alertmanager import am_alert

    alert = Alert(id="a1", status="firing", type="hang", severity="critical", job="j", ranks=(3,), nodes=("n1",),
                  starts_at=time.time(), summary="stuck")
    monkeypatch.delenv("STEPWATCH_RUNBOOK_BASE_URL", raising=False)
    url = alert.to_dict()["annotations"]["runbook_url"]
    assert url == "docs/runbooks/hang.md" and (REPO / url).is_file()  # the default: this repository's page
    monkeypatch.setenv("STEPWATCH_RUNBOOK_BASE_URL", "https://wiki.example/stepwatch/runbooks/")
    assert alert.to_dict()["annotations"]["runbook_url"] == "https://wiki.example/stepwatch/runbooks/hang.md"
    sent = am_alert(alert, now=time.time(), resend_interval=60)
    assert sent["annotations"]["runbook_url"] == "https://wiki.example/stepwatch/runbooks/hang.md"


# -- Prometheus rules -----------------------------------------------------------------------------

def test_promtool_checks_and_unit_tests_the_rules():
    promtool = tool("promtool", package="Debian package prometheus")
    out = run(promtool, "check", "rules", str(RULES)).stdout
    assert "SUCCESS" in out
    out = run(promtool, "test", "rules", "stepwatch-rules.test.yml", cwd=RULES.parent).stdout
    assert "SUCCESS" in out


def test_rules_cover_worker_health_and_link_to_their_runbook_sections():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert set(alerts) == {"StepwatchWorkerDown", "StepwatchConsumerLag", "StepwatchDeadLettersRising",
                           "StepwatchProcessingFailures"}
    health = (RUNBOOKS / "stepwatch-health.md").read_text()
    for name, rule in alerts.items():
        assert rule["labels"]["source"] == "stepwatch-health" and rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["runbook_url"] == f"docs/runbooks/stepwatch-health.md#{name.lower()}"
        assert f"\n## {name}\n" in health
    assert sum(1 for r in rules if "record" in r) >= 8


# -- metric names: the dashboard's and the rules' against the worker's ------------------------------

PROMQL_WORDS = {"sum", "by", "without", "rate", "increase", "histogram_quantile", "or", "and", "unless", "on",
                "ignoring", "group_left", "group_right", "bool", "offset", "avg", "max", "min", "count",
                "label_values", "humanize"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (Grafana variables allowed): label matchers, ranges,
    strings and grouping clauses removed, then the identifiers that are not functions or keywords."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w$:.])([A-Za-z_:][\w:]*)\s*(\()?", text):
        word, call = m.group(1), m.group(2)
        if not call and word not in PROMQL_WORDS:
            names.add(word)
    return names


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    # label_values(METRIC, LABEL): the metric only
    exprs += [re.sub(r"label_values\(\s*([^,)]+)(,[^)]*)?\)", r"\1", v["definition"])
              for v in dash["templating"]["list"] if v.get("definition")]
    return exprs


def rule_exprs() -> list[str]:
    return [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def referenced_metric_names() -> dict[str, set[str]]:
    out = {"dashboard": set(), "rules": set()}
    for expr in dashboard_exprs():
        out["dashboard"] |= promql_metric_names(expr)
    for expr in rule_exprs():
        out["rules"] |= promql_metric_names(expr)
    return out


def test_the_metric_name_scan_finds_names_and_nothing_else():
    assert promql_metric_names('sum by (le, loop) (rate(stepwatch_x_bucket{instance=~"$i", a="b"}[$__range]))') \
        == {"stepwatch_x_bucket"}
    assert promql_metric_names('up{job="w"} == 0 or stepwatch_ready == 0') == {"up", "stepwatch_ready"}
    names = referenced_metric_names()
    assert len(names["dashboard"]) >= 15 and len(names["rules"]) >= 10
    assert all(n == "up" or n.startswith("stepwatch_") for n in names["dashboard"] | names["rules"]), names


def test_dashboard_covers_the_fleet_job_and_worker_views():
    dash = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert [r.split(":")[0] for r in rows] == ["Fleet", "Jobs", "Worker health", "Alert quality"]
    titles = " | ".join(p["title"] for p in dash["panels"])
    for word in ("GPU-hours lost", "MTTR", "Incidents", "Node suspects", "Steps per second", "Consumer lag",
                 "Workers ready", "Detection time", "Precision by rule"):
        assert word in titles, word
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dash["panels"] if "targets" in p)


def exported_names(metrics_text: str) -> set[str]:
    """Sample names a Prometheus scrape of this text gives, families without samples included."""
    names = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            base = name.removesuffix("_total")
            names |= {name, base}
            if kind == "counter":
                names.add(base + "_total")
            if kind == "histogram":
                names |= {base + "_bucket", base + "_sum", base + "_count"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


@pytest.mark.kafka
def test_a_live_worker_exports_every_metric_the_dashboard_and_rules_use_and_alerts_link_runbooks(
        kafka_bootstrap, topic_prefix, start_worker):
    from opsupport import FakeAlertmanager, free_port, get, send_steps, wait_for
    from support import read_all_alerts

    port = free_port()
    with FakeAlertmanager() as am:
        start_worker(STEPWATCH_WORKER_WEB_PORT=str(port), STEPWATCH_ALERTMANAGER_URL=am.url,
                     STEPWATCH_RUNBOOK_BASE_URL="https://runbooks.example/stepwatch")
        send_steps(kafka_bootstrap, topic_prefix + "events", job="live", ranks=16, steps=range(0, 40), slow_rank=5,
                   factor=1.4)
        alerts = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts", until=lambda a: bool(a))
        assert alerts and alerts[0]["type"] == "straggler"
        assert alerts[0]["annotations"]["runbook_url"] == "https://runbooks.example/stepwatch/straggler.md"
        posted = wait_for(lambda: am.alerts(), what="the alert at Alertmanager")
        assert posted[0]["annotations"]["runbook_url"] == "https://runbooks.example/stepwatch/straggler.md"
        status, body = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    exported = exported_names(body.decode())
    prometheus_own = {"up"}  # added by Prometheus to every scrape target
    for where, names in referenced_metric_names().items():
        missing = sorted(names - exported - prometheus_own)
        assert not missing, f"the {where} uses metrics the worker does not export: {missing}"


# -- Alertmanager ---------------------------------------------------------------------------------

def test_amtool_accepts_the_config_and_routes_by_scope():
    amtool = tool("amtool", package="Debian package prometheus-alertmanager")
    assert "SUCCESS" in run(amtool, "check-config", str(ALERTMANAGER)).stdout
    cases = {("source=stepwatch", "scope=device", "severity=critical", "alertname=stepwatch_gpu_fault"): "hardware-oncall",
             ("source=stepwatch", "scope=platform", "severity=warning", "alertname=stepwatch_link_errors"): "platform-oncall",
             ("source=stepwatch", "scope=job", "severity=critical", "alertname=stepwatch_hang"): "job-owners",
             ("source=stepwatch", "scope=job", "severity=info", "alertname=stepwatch_imbalance"): "tickets",
             ("source=stepwatch-health", "alertname=StepwatchWorkerDown", "severity=critical"): "stepwatch-operators"}
    for labels, receiver in cases.items():
        out = run(amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels).stdout.strip()
        assert out == receiver, (labels, out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: What the sample alerts below must leave inhibited, and nothing else.
INHIBITED = {"s1", "s3", "c5", "t5", "t6", "s7"}


def test_a_real_alertmanager_inhibits_rank_pages_as_documented(tmp_path):
    binary = tool("prometheus-alertmanager", package="Debian package prometheus-alertmanager")
    from opsupport import get, wait_for

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([binary, f"--config.file={ALERTMANAGER}", f"--storage.path={tmp_path}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "am.log").open("w"))
    try:
        wait_for(lambda: get(base + "/-/ready")[0] == 200, what="Alertmanager ready", timeout=30)

        def alert(name, **labels):
            return {"labels": {"alertname": name, "source": "stepwatch", **labels},
                    "annotations": {"summary": name}}

        sent = [alert("stepwatch_hang", job="j1", severity="critical", scope="job", alert_id="h1"),
                alert("stepwatch_straggler", job="j1", severity="warning", scope="device", alert_id="s1"),
                alert("stepwatch_straggler", job="j2", severity="warning", scope="device", alert_id="s2"),
                # A node alert without a node label (today's node_suspect) must silence nothing.
                alert("stepwatch_node_suspect", severity="warning", scope="device", alert_id="n1"),
                # A node incident with a node label silences that node's rank pages only.
                alert("stepwatch_node_incident", node="gpu-7", severity="critical", scope="device",
                      alert_id="n2"),
                alert("stepwatch_straggler", job="j3", node="gpu-7", severity="warning", scope="device", alert_id="s3"),
                alert("stepwatch_straggler", job="j4", node="gpu-8", severity="warning", scope="device", alert_id="s4"),
                # One root cause, one page (models/oncall/citations.py): the cause silences the warnings citing it.
                alert("stepwatch_link_errors", node="gpu-9", severity="warning", scope="platform", incident="i1",
                      alert_id="l1"),
                alert("stepwatch_comm_slowdown", job="j5", severity="warning", scope="platform", incident="i1",
                      alert_id="c5"),
                alert("stepwatch_throughput_drop", job="j5", severity="warning", scope="job", incident="i1",
                      alert_id="t5"),
                alert("stepwatch_comm_slowdown", job="j6", severity="critical", scope="platform", incident="i2",
                      alert_id="c6"),
                alert("stepwatch_throughput_drop", job="j6", severity="warning", scope="job", incident="i2",
                      alert_id="t6"),
                alert("stepwatch_straggler", job="j7", severity="warning", scope="device", incident="i3",
                      alert_id="s7"),
                alert("stepwatch_gpu_fault", node="gpu-10", severity="warning", scope="device", incident="i3",
                      alert_id="g7"),
                # A critical symptom still pages.
                alert("stepwatch_hang", job="j8", severity="critical", scope="job", incident="i4", alert_id="h8"),
                alert("stepwatch_link_errors", node="gpu-11", severity="warning", scope="platform", incident="i4",
                      alert_id="l8")]
        request = urllib.request.Request(base + "/api/v2/alerts", data=json.dumps(sent).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200

        def states():
            got = orjson.loads(get(base + "/api/v2/alerts")[1])
            return {a["labels"]["alert_id"]: a["status"]["inhibitedBy"] for a in got} if len(got) == len(sent) \
                else None

        seen: list = []

        def settled():
            # Alertmanager marks an alert inhibited a moment after the inhibiting one is in: wait for it (a busy
            # machine showed every alert in and none inhibited yet), then say what it last showed if it never does.
            got = states()
            seen[:] = [got]
            return got if got is not None and {k for k, by in got.items() if by} == INHIBITED else None

        try:
            wait_for(settled, what=f"the inhibition of {sorted(INHIBITED)}", timeout=60)
        except AssertionError:
            raise AssertionError(f"Alertmanager did not inhibit {sorted(INHIBITED)} only: {seen}") from None
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- Helm -----------------------------------------------------------------------------------------

def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(tool("helm", package="go install helm.sh/helm/v3/cmd/helm@v3.22.0"), *args, check=check)


def rendered(*sets: str) -> list[dict]:
    argv = ["template", "sw", str(CHART), *PROMETHEUS_OPERATOR]
    for s in sets:
        argv += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*argv).stdout) if d]


#: A cluster with prometheus-operator's CRDs, as `helm install` would see it (.Capabilities.APIVersions).
PROMETHEUS_OPERATOR = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
                       "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")


def test_helm_lint_strict_passes():
    out = helm("lint", "--strict", str(CHART)).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_helm_template_renders_every_kind_from_the_one_rule_and_dashboard_file():
    docs = rendered("runbookBaseUrl=https://wiki.example/rb/")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "ConfigMap", "DaemonSet", "Deployment", "PodDisruptionBudget", "PrometheusRule",
                     "Secret", "Service", "ServiceAccount", "ServiceMonitor"]
    by_kind = {d["kind"]: d for d in docs if d["kind"] != "ConfigMap"}
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}

    agent = by_kind["DaemonSet"]["spec"]["template"]["spec"]
    assert agent["priorityClassName"] == "system-node-critical"
    assert {v["hostPath"]["path"] for v in agent["volumes"] if "hostPath" in v} == {"/proc", "/sys"}
    (c,) = agent["containers"]
    assert c["args"][:3] == ["agent", "--node", "$(NODE_NAME)"] and "/host/sys" in c["args"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]
    assert all(m["readOnly"] for m in c["volumeMounts"])

    worker = by_kind["Deployment"]["spec"]["template"]["spec"]
    assert worker["securityContext"]["runAsNonRoot"] is True
    assert worker["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/health"
    service = by_kind["Service"]
    monitor = by_kind["ServiceMonitor"]["spec"]
    assert service["metadata"]["labels"][monitor["jobLabel"]] == "stepwatch-worker"  # the rules' job label
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["path"] == "/metrics"

    # The PrometheusRule is the rule file, runbook URLs rebased.
    want = yaml.safe_load(RULES.read_text().replace("runbook_url: docs/runbooks/",
                                                    "runbook_url: https://wiki.example/rb/"))
    assert by_kind["PrometheusRule"]["spec"] == want
    dashboard = maps["sw-stepwatch-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    got = json.loads(dashboard["data"]["stepwatch-dashboard.json"])
    assert got["panels"] == json.loads(DASHBOARD.read_text())["panels"]
    env = maps["sw-stepwatch-env"]["data"]
    assert env["STEPWATCH_RUNBOOK_BASE_URL"] == "https://wiki.example/rb/"
    assert env["STEPWATCH_ONCALL_DRY_RUN"] == "true" and env["STEPWATCH_ONCALL_HOOKS_ENABLED"] == "false"


def test_helm_agent_mounts_an_optional_topology_file_it_rereads():
    def agent(*sets):
        [ds] = [d for d in rendered(*sets) if d["kind"] == "DaemonSet"]
        spec = ds["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        return c, {v["name"]: v for v in spec["volumes"]}

    c, volumes = agent()
    assert "--topology" not in c["args"] and "topology" not in volumes  # off by default
    c, volumes = agent("agent.topology.configMap=fabric-topology", "agent.topology.key=ibnetdiscover.txt")
    assert c["args"][-2:] == ["--topology", "/etc/stepwatch/topology/ibnetdiscover.txt"]
    assert volumes["topology"]["configMap"] == {"name": "fabric-topology",
                                                "items": [{"key": "ibnetdiscover.txt", "path": "ibnetdiscover.txt"}]}
    # the directory is mounted, never with subPath: a ConfigMap update reaches the running agent
    [mount] = [m for m in c["volumeMounts"] if m["name"] == "topology"]
    assert mount == {"name": "topology", "mountPath": "/etc/stepwatch/topology", "readOnly": True}
    c, volumes = agent("agent.topology.hostPath=/var/lib/stepwatch/lldp.json")
    assert c["args"][-2:] == ["--topology", "/etc/stepwatch/topology/lldp.json"]
    assert volumes["topology"]["hostPath"] == {"path": "/var/lib/stepwatch", "type": "Directory"}
    both = helm("template", "sw", str(CHART), "--set", "agent.topology.configMap=c", "--set",
                "agent.topology.hostPath=/x/y", check=False)
    assert both.returncode != 0 and "not both" in both.stderr
    assert helm("lint", "--strict", str(CHART), "--set", "agent.topology.configMap=c").returncode == 0


def _agent_pod(*sets: str) -> tuple[dict, dict]:
    [ds] = [d for d in rendered(*sets) if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    return spec, c


def test_helm_agent_zero_code_privileges_are_an_opt_in_the_docs_name():
    """Issue 44 row 15: off by default (non-root, every capability dropped, no hostPID); on, hostPID and root
    with only the capabilities values.yaml lists, each named in docs/zero-code.md."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["agent"]["zeroCode"]
    spec, c = _agent_pod()
    assert "hostPID" not in spec and "hostNetwork" not in spec and values["enabled"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]} and "--nccl-inspector-dir" not in c["args"]
    spec, c = _agent_pod("agent.zeroCode.enabled=true", "agent.zeroCode.inspectorDir=/var/log/nccl-inspector")
    sc = c["securityContext"]
    assert spec["hostPID"] is True and "hostNetwork" not in spec
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": values["capabilities"]}
    i = c["args"].index("--nccl-inspector-dir")
    [mount] = [m for m in c["volumeMounts"] if m["mountPath"] == c["args"][i + 1]]
    assert mount["readOnly"] is True
    spec, c = _agent_pod("agent.zeroCode.enabled=true", "agent.zeroCode.ras=localhost:28028",
                         "agent.zeroCode.flightRecorder=true")
    assert spec["hostNetwork"] is True and c["args"][c["args"].index("--nccl-ras") + 1] == "localhost:28028"
    assert c["securityContext"]["capabilities"]["add"] == values["capabilities"] + values["flightRecorderCapabilities"]
    result = helm("template", "sw", str(CHART), "--set", "agent.zeroCode.ras=localhost:28028", check=False)
    assert result.returncode != 0 and "agent.zeroCode.enabled=true" in result.stderr


def test_zero_code_docs_name_the_privileges_the_chart_grants():
    values = yaml.safe_load((CHART / "values.yaml").read_text())["agent"]["zeroCode"]
    docs = (REPO / "docs" / "zero-code.md").read_text()
    for cap in values["capabilities"] + values["flightRecorderCapabilities"]:
        assert f"CAP_{cap}" in docs, cap
    for word in ("hostPID", "agent.zeroCode.enabled", "runAsUser: 0"):
        assert word in docs, word


def test_helm_kafka_security_comes_from_secrets():
    docs = rendered("kafka.security.protocol=SASL_SSL", "kafka.security.sasl.username=stepwatch",
                    "kafka.security.sasl.existingSecret=kafka-user", "kafka.security.tls.existingSecret=kafka-ca")
    # The existing SASL Secret is used: the only Secret the chart makes is the worker's web token / peer key.
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == ["sw-stepwatch-worker-auth"]
    env = next(d for d in docs if d["metadata"]["name"] == "sw-stepwatch-env")["data"]
    assert env["STEPWATCH_SECURITY_SASL_PASSWORD_FILE"] == "/etc/stepwatch/kafka-sasl/password"
    assert env["STEPWATCH_SECURITY_SSL_CAFILE"] == "/etc/stepwatch/kafka-tls/ca.crt"
    assert not any("PASSWORD=" in k or k == "STEPWATCH_SECURITY_SASL_PASSWORD" for k in env)
    for kind in ("Deployment", "DaemonSet"):
        spec = next(d for d in docs if d["kind"] == kind)["spec"]["template"]["spec"]
        secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        auth = {"sw-stepwatch-worker-auth"} if kind == "Deployment" else set()  # the worker's token and peer key
        assert secrets == {"kafka-user", "kafka-ca"} | auth, kind
    # Values the worker would refuse are refused at render time (values.schema.json) ...
    result = helm("template", "sw", str(CHART), "--set", "worker.consumer=kafka", check=False)
    assert result.returncode != 0 and "/worker/consumer" in result.stderr
    # ... and so is SASL without a user name.
    result = helm("template", "sw", str(CHART), "--set", "kafka.security.protocol=SASL_SSL", check=False)
    assert result.returncode != 0 and "sasl.username is required" in result.stderr


def _worker(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]


def _secret_mounts(worker: dict) -> dict[str, tuple[str, str, str]]:
    """Mount path -> (Secret, key, file) of each Secret volume of the worker container."""
    volumes = {v["name"]: v["secret"] for v in worker["volumes"] if "secret" in v}
    (container,) = worker["containers"]
    out = {}
    for m in container["volumeMounts"]:
        if m["name"] in volumes:
            assert m["readOnly"] is True, m
            (item,) = volumes[m["name"]]["items"]
            out[m["mountPath"]] = (volumes[m["name"]]["secretName"], item["key"], item["path"])
    return out


def test_helm_worker_binds_the_pod_ip_with_a_bearer_token_and_a_peer_key_from_a_generated_secret(tmp_path):
    import base64

    docs = rendered()
    worker = _worker(docs)
    (container,) = worker["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # Off loopback (the Service, the ServiceMonitor and the peers' proxy reach the pod IP), so a token.
    assert env["STEPWATCH_WORKER_WEB_BIND"] == "0.0.0.0"
    assert "STEPWATCH_WORKER_WEB_ALLOW_UNAUTHENTICATED" not in env
    assert env["STEPWATCH_WORKER_CANONICAL_URL"] == "http://$(POD_IP):6066"
    mounts = _secret_mounts(worker)
    token_dir, _, token_name = env["STEPWATCH_WORKER_WEB_TOKEN_FILE"].rpartition("/")
    key_dir, _, key_name = env["STEPWATCH_WORKER_PEER_KEY_FILE"].rpartition("/")
    assert mounts[token_dir] == ("sw-stepwatch-worker-auth", "web-token", token_name)
    assert mounts[key_dir] == ("sw-stepwatch-worker-auth", "peer-key", key_name)
    # The worker reads these names (stepwatch/config.py), and with the Secret's files it starts: the
    # off-loopback bind is accepted with the token, and refused without it (streams/web_auth.py).
    import dataclasses

    from stepwatch.config import Settings
    from stepwatch.streams.web_auth import web_token

    settings = Settings.from_env(env).worker
    assert (settings.web_bind, settings.web_token_file, settings.peer_key_file) == (
        "0.0.0.0", env["STEPWATCH_WORKER_WEB_TOKEN_FILE"], env["STEPWATCH_WORKER_PEER_KEY_FILE"])
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    token_file = tmp_path / token_name
    token_file.write_bytes(base64.b64decode(secret["data"]["web-token"]))
    assert web_token(dataclasses.replace(settings, web_token_file=str(token_file))) == token_file.read_text()
    with pytest.raises(ValueError, match="not loopback"):
        web_token(dataclasses.replace(settings, web_token_file=""))
    # Every replica signs the workers topic with the one generated key (streams/registry.py).
    from stepwatch.streams.registry import registry_for

    key_file = tmp_path / key_name
    key_file.write_bytes(base64.b64decode(secret["data"]["peer-key"]))
    whole = dataclasses.replace(Settings.from_env(env), worker=dataclasses.replace(settings, peer_key_file=str(key_file)))
    assert registry_for(whole, "workers", group=None).key == key_file.read_bytes().strip()
    # The probes need no token: /health is open (streams/web_auth.py).
    from stepwatch.streams.web_auth import OPEN_PATHS

    for probe in ("readinessProbe", "startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
        assert container[probe]["httpGet"]["path"] in OPEN_PATHS
    # The generated Secret: a random token and a different random key, in every replica the same.
    assert secret["metadata"]["name"] == "sw-stepwatch-worker-auth"
    token = base64.b64decode(secret["data"]["web-token"]).decode()
    key = base64.b64decode(secret["data"]["peer-key"]).decode()
    assert len(token) >= 32 and len(key) >= 32 and token != key
    assert token != base64.b64decode(next(d for d in rendered() if d["kind"] == "Secret")["data"]["web-token"]).decode()
    # Prometheus sends the token from the same Secret.
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")["spec"]
    assert monitor["endpoints"][0]["authorization"] == {
        "type": "Bearer", "credentials": {"name": "sw-stepwatch-worker-auth", "key": "web-token"}}
    # No NetworkPolicy unless asked for.
    assert "NetworkPolicy" not in [d["kind"] for d in docs]


def test_helm_worker_token_and_peer_key_from_existing_secrets():
    docs = rendered("worker.web.token.existingSecret=sw-web", "worker.web.token.key=token",
                    "worker.peerKey.existingSecret=sw-peers", "worker.peerKey.key=hmac")
    assert "Secret" not in [d["kind"] for d in docs]  # both exist: the chart makes none
    worker = _worker(docs)
    env = {e["name"]: e.get("value") for e in worker["containers"][0]["env"]}
    mounts = _secret_mounts(worker)
    assert mounts[env["STEPWATCH_WORKER_WEB_TOKEN_FILE"].rpartition("/")[0]][:2] == ("sw-web", "token")
    assert mounts[env["STEPWATCH_WORKER_PEER_KEY_FILE"].rpartition("/")[0]][:2] == ("sw-peers", "hmac")
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")["spec"]
    assert monitor["endpoints"][0]["authorization"]["credentials"] == {"name": "sw-web", "key": "token"}
    # Only one of the two existing: the chart's Secret carries the other one alone.
    docs = rendered("worker.web.token.existingSecret=sw-web")
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert set(secret["data"]) == {"peer-key"}
    # The same key for both generated secrets is refused: they are separate secrets.
    result = helm("template", "sw", str(CHART), "--set", "worker.peerKey.key=web-token", check=False)
    assert result.returncode != 0 and "must differ" in result.stderr
    # A loopback bind (the pod unreachable to its Service and probes) is refused by values.schema.json ...
    for bind in ("127.0.0.1", "localhost", "::1"):
        result = helm("template", "sw", str(CHART), "--set-string", f"worker.web.bind={bind}", check=False)
        assert result.returncode != 0 and "/worker/web/bind" in result.stderr, bind
    # ... and so is a key name a Secret cannot hold.
    result = helm("template", "sw", str(CHART), "--set", "worker.web.token.key=a/b", check=False)
    assert result.returncode != 0 and "/worker/web/token/key" in result.stderr


def test_helm_network_policy_opens_the_web_port_to_the_namespace_and_prometheus_only():
    docs = rendered("networkPolicy.enabled=true",
                    "networkPolicy.prometheus.namespaceSelector.kubernetes\\.io/metadata\\.name=monitoring",
                    "networkPolicy.prometheus.podSelector.app\\.kubernetes\\.io/name=prometheus")
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    spec = policy["spec"]
    worker = next(d for d in docs if d["kind"] == "Deployment")
    assert spec["podSelector"]["matchLabels"].items() <= worker["spec"]["template"]["metadata"]["labels"].items()
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert rule["from"] == [
        {"podSelector": {}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
    assert helm("lint", "--strict", str(CHART), "--set", "networkPolicy.enabled=true").returncode == 0


def test_helm_notes_say_how_to_read_the_dashboard_with_the_token(tmp_path):
    # helm template does not render NOTES.txt: a copy of the chart renders it into a ConfigMap.
    chart = tmp_path / "stepwatch"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text('{{- define "notes" -}}\n' + notes + "{{- end -}}\n")
    (chart / "templates" / "notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include "notes" . | quote }}\n')
    out = helm("template", "sw", str(chart), "--namespace", "ml", "--show-only", "templates/notes.yaml").stdout
    text = yaml.safe_load(out)["data"]["notes"]
    assert ("kubectl -n ml get secret sw-stepwatch-worker-auth -o jsonpath='{.data.web-token}' | base64 -d"
            in text)
    assert "kubectl -n ml port-forward svc/sw-stepwatch-worker 6066" in text
    assert 'curl -H "Authorization: Bearer $TOKEN" http://localhost:6066/jobs' in text
    assert "http://localhost:6066/login" in text  # a browser signs in once (a cookie), no extension
    assert "NOT installed: the cluster has no PrometheusRule CRD" in text  # helm template: no CRDs


def test_helm_agent_lands_on_gpu_nodes_only_by_default():
    """Issue 43: the DaemonSet asked for every node (every taint tolerated, no selector); it wants GPU nodes."""
    [ds] = [d for d in rendered() if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert keys == {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"}
    assert all(t.get("key") == "nvidia.com/gpu" for t in spec["tolerations"])  # not `operator: Exists` alone
    assert not any(t.get("operator") == "Exists" and "key" not in t for t in spec["tolerations"])
    # both overridable: a site whose GPU nodes carry another label
    [ds] = [d for d in rendered("agent.affinity=null", "agent.nodeSelector.gpu=yes") if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert "affinity" not in spec and spec["nodeSelector"] == {"gpu": "yes"}


def test_helm_operator_resources_only_where_their_crds_exist():
    bare = [d["kind"] for d in yaml.safe_load_all(helm("template", "sw", str(CHART)).stdout) if d]
    assert "ServiceMonitor" not in bare and "PrometheusRule" not in bare  # would fail to install without the CRDs
    with_crds = [d["kind"] for d in rendered()]
    assert "ServiceMonitor" in with_crds and "PrometheusRule" in with_crds


def test_helm_worker_pdb_and_optional_ingress():
    [pdb] = [d for d in rendered() if d["kind"] == "PodDisruptionBudget"]
    [worker] = [d for d in rendered() if d["kind"] == "Deployment"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= worker["spec"]["template"]["metadata"]["labels"].items()
    assert not [d for d in rendered("worker.replicas=1") if d["kind"] == "PodDisruptionBudget"]  # would block drains
    assert not [d for d in rendered() if d["kind"] == "Ingress"]  # off by default
    [ing] = [d for d in rendered("ingress.enabled=true", "ingress.host=sw.example", "ingress.className=nginx")
             if d["kind"] == "Ingress"]
    [rule] = ing["spec"]["rules"]
    assert rule["host"] == "sw.example" and ing["spec"]["ingressClassName"] == "nginx"
    assert rule["http"]["paths"][0]["backend"]["service"]["name"] == "sw-stepwatch-worker"
    assert helm("lint", "--strict", str(CHART), "--set", "ingress.enabled=true").returncode == 0


# -- Slurm ----------------------------------------------------------------------------------------

def test_slurm_scripts_parse():
    for script in ("stepwatch-taskprolog.sh", "stepwatch-drain"):
        run("bash", "-n", str(SLURM / script))
        assert os.access(SLURM / script, os.X_OK), script


def _taskprolog(tmp_path: Path, **env: str) -> list[str]:
    base = {"PATH": os.environ["PATH"], "STEPWATCH_SLURM_CONFIG": str(tmp_path / "slurm.env")}
    return run("bash", str(SLURM / "stepwatch-taskprolog.sh"), env={**base, **env}).stdout.splitlines()


def test_taskprolog_exports_the_stepwatch_and_nccl_inspector_environment(tmp_path):
    plugin = tmp_path / "libnccl-profiler-inspector.so"
    plugin.write_bytes(b"")
    (tmp_path / "slurm.env").write_text(
        "STEPWATCH_SITE_KAFKA_BOOTSTRAP=kafka-0:9092,kafka-1:9092\n"
        f"STEPWATCH_SITE_NCCL_INSPECTOR_PLUGIN={plugin}\n"
        f"STEPWATCH_SITE_NCCL_INSPECTOR_DUMP_ROOT={tmp_path}/dumps\n"
        "PATH=/evil\n$(touch /tmp/x)=1\n")
    slurm = dict(SLURM_JOB_ID="4242", SLURM_PROCID="17", SLURM_NTASKS="64", SLURMD_NODENAME="gpu-007",
                 SLURM_LOCALID="1")
    assert _taskprolog(tmp_path, **slurm) == [
        "export STEPWATCH_JOB=4242", "export STEPWATCH_NODE=gpu-007",
        "export STEPWATCH_KAFKA_BOOTSTRAP=kafka-0:9092,kafka-1:9092",
        f"export NCCL_PROFILER_PLUGIN={plugin}", "export NCCL_INSPECTOR_ENABLE=1",
        f"export NCCL_INSPECTOR_DUMP_DIR={tmp_path}/dumps/4242",
        "export NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000"]
    assert (tmp_path / "dumps" / "4242").is_dir()
    # The job's own values win (its own profiler plugin, its own job name); an opt-out gives nothing.
    out = _taskprolog(tmp_path, **slurm, STEPWATCH_JOB="llm-7b", NCCL_PROFILER_PLUGIN="/opt/mine.so")
    assert "export STEPWATCH_JOB=4242" not in out and not any(line.startswith("export NCCL_") for line in out)
    assert _taskprolog(tmp_path, **slurm, STEPWATCH_MONITOR_ENABLED="0") == []
    # No plugin on the node: stepwatch's environment only.
    plugin.unlink()
    assert not any("NCCL" in line for line in _taskprolog(tmp_path, **slurm))


def _task_environment(tmp_path: Path, slurm: dict[str, str]) -> dict[str, str]:
    """The task's environment after the TaskProlog: Slurm's variables plus the prolog's exports."""
    out = _taskprolog(tmp_path, **slurm)
    assert all(line.startswith("export ") for line in out), out
    return {**slurm, **dict(line.removeprefix("export ").split("=", 1) for line in out)}


def test_taskprolog_leaves_the_rank_to_the_launcher_so_torchrun_ranks_are_not_node_indexes(tmp_path):
    from stepwatch.producers.monitor_config import MonitorConfig

    (tmp_path / "slurm.env").write_text("")
    # sbatch --nodes=4 --ntasks-per-node=1 + srun torchrun --nproc-per-node=8: the prolog runs once
    # per node, where SLURM_PROCID is the node's index (2), SLURM_NTASKS the node count (4).
    node = dict(SLURM_JOB_ID="4242", SLURM_PROCID="2", SLURM_NTASKS="4", SLURMD_NODENAME="gpu-002",
                SLURM_LOCALID="0")
    task = _task_environment(tmp_path, node)
    assert not {"STEPWATCH_RANK", "STEPWATCH_WORLD_SIZE", "STEPWATCH_GPU"} & task.keys()
    # torchrun then starts local rank 5 of that node as global rank 21 of 32.
    cfg = MonitorConfig(environ={**task, "RANK": "21", "WORLD_SIZE": "32", "LOCAL_RANK": "5"}, enabled=False)
    assert (cfg.job, cfg.rank, cfg.world_size, cfg.gpu, cfg.node) == ("4242", 21, 32, 5, "gpu-002")
    # srun --ntasks=64 python train.py (one task per rank, no RANK): Slurm's own numbering is the rank.
    rank = dict(SLURM_JOB_ID="4243", SLURM_PROCID="17", SLURM_NTASKS="64", SLURMD_NODENAME="gpu-007",
                SLURM_LOCALID="1")
    cfg = MonitorConfig(environ=_task_environment(tmp_path, rank), enabled=False)
    assert (cfg.job, cfg.rank, cfg.world_size, cfg.gpu, cfg.node) == ("4243", 17, 64, 1, "gpu-007")


def test_the_drain_template_renders_commands_the_drain_executor_runs(tmp_path):
    from stepwatch.models.oncall.action_hooks import ActionHooks
    from stepwatch.models.alerts import Alert

    settings = dict(line.split("=", 1) for line in (SLURM / "oncall.env").read_text().splitlines()
                    if line and not line.startswith("#"))
    assert settings["STEPWATCH_ONCALL_DRY_RUN"] == "true"
    hooks = ActionHooks(slurm_template=settings["STEPWATCH_ONCALL_SLURM_TEMPLATE"])
    alert = Alert(id="e07c45d36c7bed1ca514", status="firing", type="node_suspect", severity="critical", job="",
                  ranks=(), nodes=("gpu-7",), starts_at=1.0, summary="node gpu-7",
                  evidence={"failure_class": "node_suspect",
                            "action": {"kind": "drain_node", "exclude_nodes": ["gpu-7"]}})
    (command,) = hooks.record(alert)["commands"]["slurm"]
    assert command == 'scontrol update nodename=gpu-7 state=drain reason="stepwatch: node_suspect e07c45d36c7bed1ca514"'

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {tmp_path}/argv\n')
    (fake / "scontrol").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}"}
    drain = str(SLURM / "stepwatch-drain")
    out = run(drain, command, env=env).stdout
    assert out.startswith("stepwatch-drain: dry run") and not (tmp_path / "argv").exists()
    run(drain, command, env={**env, "STEPWATCH_DRAIN_APPLY": "1"})
    assert (tmp_path / "argv").read_text().splitlines() == [
        "update", "nodename=gpu-7", "state=drain", "reason=stepwatch: node_suspect e07c45d36c7bed1ca514"]
    bad = run(drain, 'scontrol update nodename=gpu-7;reboot state=drain reason="stepwatch: x"',
              env={**env, "STEPWATCH_DRAIN_APPLY": "1"}, check=False)
    assert bad.returncode == 3 and "refused" in bad.stderr


# -- containers -----------------------------------------------------------------------------------

def test_the_image_runs_as_a_user_with_a_healthcheck_and_the_agent_extra():
    lines = [ln.strip() for ln in (REPO / "Dockerfile").read_text().splitlines()]
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert any(ln.startswith("HEALTHCHECK") for ln in lines) and "/health" in (REPO / "Dockerfile").read_text()
    assert '"stepwatch[agent]"' in (REPO / "Dockerfile").read_text()
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".venv", ".cache", ".git", "artifacts"} <= ignored
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert all("restart" in s for s in services.values())
    assert services["kafka"]["restart"] == "unless-stopped" and services["worker"]["restart"] == "unless-stopped"
    assert "kafka-data:/var/lib/kafka/data" in services["kafka"]["volumes"]
    assert services["kafka"]["environment"]["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
    assert set(compose["volumes"]) >= {"kafka-data"}


def test_kubernetes_node_actions_render_a_taint_or_a_node_condition():
    from stepwatch.models.oncall.action_hooks import ActionHooks
    from stepwatch.models.alerts import Alert

    alert = Alert(id="e07c45d36c7bed1ca514", status="firing", type="gpu_fault", severity="critical", job="",
                  ranks=(), nodes=("gpu-7",), starts_at=1.0, summary="Xid 79", scope="device",
                  evidence={"failure_class": "xid_79_off_bus",
                            "action": {"kind": "drain_node", "exclude_nodes": ["gpu-7"]}})
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["oncall"]["dryRun"] is True and values["oncall"]["hooksEnabled"] is False
    record = ActionHooks(kubernetes_template=values["oncall"]["kubernetesTemplate"]).record(alert)
    assert record["dry_run"] is True
    assert record["commands"]["kubernetes"] == [
        "kubectl taint nodes gpu-7 stepwatch.io/suspect=xid_79_off_bus:NoSchedule --overwrite"]
    # The NodeCondition alternative documented in deploy/README.md renders a valid strategic-merge patch.
    (template,) = [ln for ln in (DEPLOY / "README.md").read_text().splitlines()
                   if ln.startswith("kubectl patch node {node}")]
    (command,) = ActionHooks(kubernetes_template=template).record(alert)["commands"]["kubernetes"]
    argv = shlex.split(command)
    assert argv[:6] == ["kubectl", "patch", "node", "gpu-7", "--subresource=status", "--type=strategic"]
    patch = json.loads(argv[argv.index("-p") + 1])
    assert patch["status"]["conditions"] == [{"type": "StepwatchSuspect", "status": "True",
                                              "reason": "xid_79_off_bus",
                                              "message": "stepwatch alert e07c45d36c7bed1ca514"}]


def test_compose_workers_verify_each_other_with_a_generated_peer_key():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    maker = services["peer-key"]
    script = maker["command"][0]
    compile(script, "peer-key", "exec")  # the one-shot that writes the key is valid Python
    assert "secrets.token_hex" in script and "O_EXCL" in script  # random, made once
    workers = [s for name, s in services.items() if s.get("command") == ["worker"]]
    assert len(workers) >= 2
    for worker in workers:
        key_file = worker["environment"]["STEPWATCH_WORKER_PEER_KEY_FILE"]
        mounts = [v for v in worker["volumes"] if v.startswith("peer-key:")]
        assert mounts and mounts[0].endswith(":ro") and key_file.startswith(mounts[0].split(":")[1])
        assert worker["depends_on"]["peer-key"]["condition"] == "service_completed_successfully"
