"""The switch behind each port (producers/port_neighbors.py, ``stepwatch agent --topology FILE``): the
three file formats, the agent's topology events, and a leaf switch fault named by its switch and ports.

Fixtures (tests/fixtures/topology/README.md) are written in the formats ibnetdiscover and lldpctl print.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from stepwatch.config import Settings
from stepwatch.models.wire.events import decode_message, parse_event
from stepwatch.models.telemetry.telemetry_hub import TelemetrySettings
from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker
from stepwatch.producers.agent import NodeAgent
from stepwatch.producers.port_neighbors import (LocalPort, Source, TopologyFileError, nic_entries,
                                                parse_topology)

from engine_driver import replay
from support import run_stepwatch, stepwatch_env
from switch_gen import Fleet, events, ibnetdiscover_dump
from test_agent import make_sysfs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "topology"


def neighbors_of(name: str, node: str, ports: list[LocalPort]):
    return parse_topology((FIXTURES / name).read_text()).neighbors(node, ports)


def test_ibnetdiscover_output_names_each_hcas_switch_and_switch_port():
    topo = parse_topology((FIXTURES / "ibnetdiscover.txt").read_text())
    assert topo.source is Source.IBNETDISCOVER
    # by the HCA's node GUID as sysfs writes it
    [(key, n)] = topo.neighbors("gpu-052", [LocalPort("mlx5_0", 1, node_guid="b83f:d203:00a1:3c4e")]).items()
    assert key == ("mlx5_0", 1)
    assert (n.switch, n.switch_port, n.switch_id) == ("leaf-07", "1", "0xfc6a1c0300e52b00")
    # by its NodeDescription ("<hostname> <device>") when the GUID is unknown; a domain name is not in it
    [n] = topo.neighbors("gpu-053.cluster.local", [LocalPort("mlx5_0", 1, node_guid="0xdead")]).values()
    assert (n.switch, n.switch_port) == ("leaf-07", "2")
    # a CA whose own block is missing: its cable as the switch's block lists it
    [n] = topo.neighbors("gpu-054", [LocalPort("mlx5_0", 1)]).values()
    assert (n.switch, n.switch_port) == ("leaf-07", "3")
    assert topo.neighbors("gpu-060", [LocalPort("mlx5_0", 1)])[("mlx5_0", 1)].switch == "leaf-08"
    # back to back to another HCA (no switch), a port not in the dump, a node not in the dump: nothing
    assert topo.neighbors("gpu-070", [LocalPort("mlx5_0", 1)]) == {}
    assert topo.neighbors("gpu-052", [LocalPort("mlx5_0", 2, node_guid="b83fd20300a13c4e")]) == {}
    assert topo.neighbors("gpu-999", [LocalPort("mlx5_0", 1)]) == {}


@pytest.mark.parametrize("name", ["lldpctl.json", "lldpctl-json0.json"])
def test_lldpctl_json_names_the_neighbour_of_each_roce_interface(name):
    ports = [LocalPort("mlx5_1", 1, netdev="ens3np0"), LocalPort("mlx5_2", 1, netdev="ens9np0")]
    found = neighbors_of(name, "gpu-052", ports)
    assert list(found) == [("mlx5_1", 1)]
    n = found[("mlx5_1", 1)]
    assert (n.switch, n.switch_port, n.switch_id, n.source) == ("roce-leaf-03", "Ethernet48", "1c:34:da:7e:11:00",
                                                                 Source.LLDP)


def test_lldp_neighbour_without_a_system_name_is_named_by_its_chassis_id():
    [n] = neighbors_of("lldpctl.json", "h", [LocalPort("eth", 1, netdev="eno1")]).values()
    # port id is a MAC: its description names the port
    assert (n.switch, n.switch_port) == ("00:00:5e:00:53:01", "ge-0/0/12")


def test_a_map_written_by_hand_in_yaml_or_json():
    ports = [LocalPort("mlx5_0", 1), LocalPort("mlx5_1", 1), LocalPort("mlx5_1", 2)]
    found = neighbors_of("map.yaml", "gpu-052", ports)
    assert {k: (n.switch, n.switch_port) for k, n in found.items()} == {
        ("mlx5_0", 1): ("leaf-07", "1"), ("mlx5_1", 1): ("roce-leaf-03", None)}
    topo = parse_topology(json.dumps({"nodes": {"gpu-053": {"mlx5_0": "leaf-07"}}}))
    assert topo.source is Source.MAP and topo.neighbors("gpu-053", ports[:1])[("mlx5_0", 1)].switch == "leaf-07"


@pytest.mark.parametrize("text, reason", [
    ("", "neither ibnetdiscover"),
    ("{not json", "not valid JSON"),
    ('{"lldp": {}}', "no lldp.interface"),
    ('{"hosts": []}', "needs a 'nodes' object"),
    ('{"nodes": {"n1": {"mlx5_0": 7}}}', "expected a switch name"),
    ("vendid=0x2c9\ndevid=0x1021\n", "neither ibnetdiscover"),
])
def test_a_file_that_is_none_of_the_formats_says_why(text, reason):
    with pytest.raises(TopologyFileError, match=reason):
        parse_topology(text)


def test_nic_entries_name_the_switch_only_when_the_nics_ports_share_it():
    topo = parse_topology(json.dumps({"nodes": {"n": {"mlx5_0/1": "leaf-1", "mlx5_0/2": "leaf-2", "mlx5_1": "leaf-1"}}}))
    ports = [LocalPort("mlx5_0", 1), LocalPort("mlx5_0", 2), LocalPort("mlx5_1", 1)]
    found = topo.neighbors("n", ports)
    split = nic_entries(found, "mlx5_0", [1, 2])
    assert "switch" not in split and [n["switch"] for n in split["neighbors"]] == ["leaf-1", "leaf-2"]
    assert nic_entries(found, "mlx5_1", [1])["switch"] == "leaf-1"
    assert nic_entries(found, "mlx5_9", [1]) == {}


# -- the agent ---------------------------------------------------------------------------------------


def agent_with(tmp_path, topology: Path, nvml=None) -> tuple[NodeAgent, list]:
    sysfs = make_sysfs(tmp_path / "sys")
    # make_sysfs gives both HCAs one GUID; a real mlx5_1 has its own
    (sysfs / "class" / "infiniband" / "mlx5_1" / "node_guid").write_text("b83f:d203:00a1:9999\n")
    settings = Settings(telemetry=TelemetrySettings(topology_file=str(topology)))
    batches: list = []
    agent = NodeAgent(node="gpu-052", settings=settings, sysfs_root=str(sysfs), proc_root=str(tmp_path),
                      nvml=nvml, sink=lambda key, evs: batches.append(evs), clock=lambda: 1_700_000_000.0)
    return agent, batches


def topology_of(batches) -> object:
    [event] = [e for batch in batches for e in batch if e["kind"] == "topology"]
    return parse_event(orjson.loads(orjson.dumps(event)))


def test_the_agent_reports_each_ports_switch_from_ibnetdiscover_output(tmp_path, capsys):
    from test_agent import fake_nvml

    agent, batches = agent_with(tmp_path, FIXTURES / "ibnetdiscover.txt", nvml=fake_nvml())
    agent.discover()
    agent.run(once=True)
    report = capsys.readouterr().err
    assert "the switch of 1 of 2 port(s) in" in report and "(ibnetdiscover: leaf-07)" in report
    topo = topology_of(batches)
    ib, roce = topo.nics
    assert ib["switch"] == "leaf-07" and ib["neighbors"] == [
        {"port": 1, "switch": "leaf-07", "switch_port": "1", "switch_id": "0xfc6a1c0300e52b00",
         "source": "ibnetdiscover"}]
    assert "switch" not in roce and "neighbors" not in roce  # a RoCE port is not in an InfiniBand dump
    assert [g["nics"] for g in topo.gpus] == [["mlx5_0"], ["mlx5_1"]]
    tracker = TelemetryTracker()
    tracker.update(topo)
    assert tracker.switches("gpu-052") == ("leaf-07",)
    assert tracker.switch_ports("gpu-052", "leaf-07") == {"mlx5_0": "1"}


def test_without_gpus_the_agent_still_reports_the_switches_and_rereads_a_changed_file(tmp_path, capsys):
    topology = tmp_path / "lldp.json"
    shutil.copy(FIXTURES / "lldpctl.json", topology)
    agent, batches = agent_with(tmp_path, topology)  # no NVML on this machine's test: no GPU
    agent.discover()
    agent.run(once=True)
    assert "GPU -> NIC topology (no GPU)" in capsys.readouterr().err
    topo = topology_of(batches)
    assert topo.gpus == () and [n.get("switch") for n in topo.nics] == [None, "roce-leaf-03"]
    # the SRE's cron job rewrites the file: the next topology event follows it
    topology.write_text(json.dumps({"nodes": {"gpu-052": {"mlx5_0": "leaf-09", "mlx5_1": "roce-leaf-04"}}}))
    event = agent.topology_event(1_700_000_060.0)
    assert [n["switch"] for n in event["nics"]] == ["leaf-09", "roce-leaf-04"]


def test_a_broken_topology_file_is_reported_and_sampling_goes_on(tmp_path, capsys, caplog):
    topology = tmp_path / "topo.txt"
    topology.write_text("not a topology\n")
    agent, batches = agent_with(tmp_path, topology)
    agent.discover()
    agent.run(once=True)
    assert "skipped: " in (err := capsys.readouterr().err) and "switch neighbours (" in err
    assert "neither ibnetdiscover output" in err
    topo = topology_of(batches)
    assert [n["device"] for n in topo.nics] == ["mlx5_0", "mlx5_1"] and "switch" not in topo.nics[0]
    assert sum(1 for b in batches for e in b if e["kind"] == "link") == 2
    topology.unlink()  # gone later: said once, in the log
    agent.topology_event(1_700_000_060.0)
    agent.topology_event(1_700_000_120.0)
    assert sum("cannot read" in r.getMessage() for r in caplog.records) == 1


def test_stepwatch_agent_topology_option(tmp_path):
    sysfs = make_sysfs(tmp_path / "sys")
    env = stepwatch_env("", "x.")
    env.pop("KAFKA_BOOTSTRAP", None)
    result = run_stepwatch("agent", "--once", "--node", "gpu-052", "--sysfs-root", str(sysfs),
                           "--topology", str(FIXTURES / "lldpctl.json"), env=env)
    [topo] = [parse_event(orjson.loads(line)) for line in result.stdout.splitlines()
              if orjson.loads(line)["kind"] == "topology"]
    assert topo.nics[1]["switch"] == "roce-leaf-03" and topo.nics[1]["neighbors"][0]["switch_port"] == "Ethernet48"
    assert "--topology FILE" in run_stepwatch("agent", "--help", env=env).stdout


def test_neighbours_on_the_wire_are_validated():
    def topo(neighbors):
        msg = {"v": 1, "kind": "topology", "node": "n1", "ts": 1.0,
               "nics": [{"device": "mlx5_0", "ports": [1], "neighbors": neighbors}]}
        return decode_message(json.dumps(msg).encode())

    [ev], rejected = topo([{"port": 1, "switch": "leaf-07", "switch_port": 17}])
    assert rejected == [] and ev.nics[0]["switch"] == "leaf-07" and ev.nics[0]["neighbors"][0]["switch_port"] == "17"
    events_, rejected = topo([{"port": 1}])
    assert events_ == [] and "switch" in str(rejected[0])


# -- one incident naming the switch ------------------------------------------------------------------


def test_a_leaf_switch_fault_is_one_incident_naming_the_switch_and_its_ports_from_an_ibnetdiscover_dump():
    fleet = Fleet(seed=3, dump=True)
    dump = ibnetdiscover_dump(fleet)
    assert dump.count("\nCa\t1 ") == 4 * 8 * 4 and dump.count("\nSwitch\t64 ") == 2
    alerts = list(replay(ev for _, ev in events(fleet)))
    ids = {a.id for a in alerts}
    assert len(ids) <= 20
    fabric = [a for a in alerts if a.type == "fabric"]
    assert len({a.id for a in fabric}) == 1
    last = fabric[-1]
    assert set(last.nodes) == set(fleet.faulty_nodes) and last.evidence["switch"] == "leaf-01"
    # 16 nodes x 4 HCAs on leaf-01's ports 1..64, as the dump cables them
    cabled = last.evidence["switch_ports"]
    assert len(cabled) == 64 and {c["switch_port"] for c in cabled} == {str(p) for p in range(1, 65)}
    assert cabled[0] == {"node": "n000", "device": "mlx5_0", "switch_port": "1"}
    assert "under switch leaf-01, its ports 1-64" in last.summary
    for a in alerts:
        assert a.type not in ("link_errors", "node_suspect"), a.summary
        assert a.evidence["action"]["kind"] != "drain_node" and a.evidence["action"]["exclude_nodes"] == []
    job_level = [a for a in alerts if a.type in ("comm_slowdown", "throughput_drop", "hang") and a.status == "firing"]
    assert {a.job for a in job_level} == {"job0", "job1"}
    for a in job_level:
        assert a.nodes == () and a.evidence["incident"] == last.id and "leaf-01" in a.summary, a.summary
