"""Both ranks of a 2-GPU node slow are one node incident (README: "a straggler of most ranks of one node is
one alert"). Found by the third generator (tests/gen3, slow_node_2gpu): the node incident needed 3 ranks
(``min_ranks``), so a node of 2 GPUs, both slow, paged twice; nodes of 4 and 8 GPUs were grouped.
"""
from __future__ import annotations

from stepwatch.models.alerts import Alert
from stepwatch.models.telemetry.incidents import NodeIncidents

from gen3.judge import judge, replay
from gen3.write import write_all


def rank_alert(r: int, node: str = "n1") -> Alert:
    return Alert(id=f"r{r}", status="firing", type="straggler", severity="warning", job="j", ranks=(r,),
                 nodes=(node,), starts_at=10.0, summary="straggler",
                 evidence={"ratio": 1.3, "rank_median": 1.3, "peer_median": 1.0, "first_step": 5,
                           "job_slowdown": 1.0, "cost_step_time": 1.4, "cost_gpus": 8})


def test_both_ranks_of_a_two_gpu_node_are_one_node_incident():
    grouper = NodeIncidents(lambda job, node: (6, 7))
    [node] = grouper.filter([rank_alert(6), rank_alert(7)])
    assert node.ranks == (6, 7) and node.evidence["incident_scope"] == "node"


def test_one_slow_rank_of_a_two_gpu_node_or_of_a_one_gpu_node_stays_a_rank_alert():
    assert [a.id for a in NodeIncidents(lambda job, node: (6, 7)).filter([rank_alert(6)])] == ["r6"]
    assert [a.id for a in NodeIncidents(lambda job, node: (3,)).filter([rank_alert(3)])] == ["r3"]


def test_the_generated_slow_two_gpu_node_is_one_incident(tmp_path):
    labels = write_all(str(tmp_path), ["slow_node_2gpu"])
    res = judge(replay(str(tmp_path / labels["slow_node_2gpu"]["file"])), labels["slow_node_2gpu"])
    assert res["ok"], res
