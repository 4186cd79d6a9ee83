"""The straggler rule's alerts, built from what its parts know: a rank slower than its peers (or, in a small
group, than its own pace), an intermittently slow rank, a rank waiting on its input pipeline, and their
resolutions. The evidence records are models/steps/straggler_evidence.py; the cost models/steps/cost.py."""

from __future__ import annotations

import numpy as np

from ..alerts import Alert, alert_id
from ..evidence import StragglerSignal
from ..resolution import Resolution, with_resolution
from .assembly import GroupStep
from .cost import straggler_cost
from .straggler_episodes import Pattern
from .straggler_evidence import Baseline, DataWaitEvidence, PeerEvidence
from .straggler_history import RankHistory


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _where(rank: int, node: str | None) -> str:
    return f"rank {rank}" + (f" on node {node}" if node else "")


def _alert(job: str, group: str, rank: int, node: str | None, first_step: int, step: GroupStep, ratio: float,
           critical_ratio: float, summary: str, evidence: dict) -> Alert:
    return Alert(id=alert_id(job, "straggler", group, rank, first_step), status="firing", type="straggler",
                 severity="critical" if ratio >= critical_ratio else "warning", job=job, ranks=(rank,),
                 nodes=(node,) if node else (), starts_at=step.ts, summary=summary, evidence=evidence)


def peer_evidence(history: RankHistory, slot: int, signal: str, *, group: str, window: int, ratio_threshold: float,
                  z_threshold: float, basis: Baseline) -> dict:
    """The evidence of the last ``window`` judged steps: the ones that made the rule true (or clear)."""
    recent = history.recent(window)
    values = history.value[slot, recent]
    peers = history.peer[slot, recent]
    ok = ~np.isnan(values)
    rank_median = float(np.median(values[ok])) if ok.any() else None
    peer_median = float(np.median(peers[ok])) if ok.any() else None
    return PeerEvidence(
        signal=StragglerSignal(signal), group=group or None, rank_median=_round(rank_median),
        peer_median=_round(peer_median),
        ratio=_round(rank_median / peer_median) if rank_median and peer_median else None,
        robust_z=_round(float(np.median(history.z[slot, recent][ok]))) if ok.any() else None,
        slow_steps=int(history.slow[slot].sum()), window=window,
        recent_ratios=tuple(_round(float(r), 3) for r in history.ratio[slot, recent][ok]),
        ratio_threshold=ratio_threshold, z_threshold=z_threshold, baseline=basis,
    ).to_dict()


def peer_alert(job: str, group: str, rank: int, node: str | None, signal: str, step: GroupStep,
               history: RankHistory, slot: int, first_step: int, *, window: int, ratio_threshold: float,
               z_threshold: float, critical_ratio: float, basis: Baseline) -> Alert:
    """A rank slower than its peers (or, ``basis`` self, than its own recent steps) since ``first_step``."""
    evidence = peer_evidence(history, slot, signal, group=group, window=window, ratio_threshold=ratio_threshold,
                             z_threshold=z_threshold, basis=basis)
    evidence.update(first_step=first_step, detected_step=step.step, **straggler_cost(  # models/steps/cost.py
        evidence, step, history.value[:, history.recent(window)], slot))
    if signal == "arrival":
        evidence["arrival_source"] = step.comm_source
        if step.comm_ops is not None:
            evidence["process_group"], evidence["op"] = step.comm_ops
    ratio = evidence["ratio"] or float(history.ratio[slot, (history.evaluated - 1) % history.ratio.shape[1]])
    where = _where(rank, node)
    among = f" among group {group}" if group else ""
    if basis is Baseline.SELF:
        summary = (f"straggler: {where} is {ratio:.2f}x slower than its own recent steps while its "
                   f"{len(step.ranks) - 1} peer(s){among} kept their pace ({signal} {evidence['rank_median']}s "
                   f"vs {evidence['peer_median']}s expected, robust z {evidence['robust_z']}) since step "
                   f"{first_step}")
    else:
        summary = (f"straggler: {where} is {ratio:.2f}x slower than its peers{among} "
                   f"({signal} {evidence['rank_median']}s vs peer median {evidence['peer_median']}s, "
                   f"robust z {evidence['robust_z']}) since step {first_step}")
    return _alert(job, group, rank, node, first_step, step, ratio, critical_ratio, summary, evidence)


def intermittent_alert(job: str, group: str, rank: int, node: str | None, signal: str, step: GroupStep,
                       history: RankHistory, slot: int, pattern: Pattern, *, window: int, ratio_threshold: float,
                       z_threshold: float, critical_ratio: float, basis: Baseline) -> Alert:
    """A rank slow on a share of its steps (``evidence.pattern: "intermittent"``)."""
    k, seen, when_slow = pattern.slow_steps, pattern.seen, pattern.when_slow
    first_step = pattern.first_step if pattern.first_step >= 0 else step.step
    # What it costs on average since it began: slow steps at their ratio, the rest at par.
    rate = min(1.0, k / pattern.span)
    ratio = 1.0 + rate * (when_slow - 1.0)
    evidence = peer_evidence(history, slot, signal, group=group, window=window, ratio_threshold=ratio_threshold,
                             z_threshold=z_threshold, basis=basis)
    evidence.update(
        pattern="intermittent", slow_steps=k, window=seen, slow_rate=_round(k / seen),
        peer_slow_rate=_round(pattern.peer_rate), slow_step_ratio=_round(when_slow), ratio=_round(ratio),
        first_step=first_step, detected_step=step.step)
    # Its mean pace against the peers' on its slow steps (its last steps are mostly clean, and a job whose
    # steps mix signals would compare the step time with the arrival time).
    if pattern.peer > 0:
        evidence.update(peer_median=_round(pattern.peer), rank_median=_round(pattern.peer * ratio))
    evidence.update(straggler_cost(evidence, step))  # models/steps/cost.py
    among = f" among group {group}" if group else ""
    summary = (f"straggler: {_where(rank, node)} is intermittently slow: {when_slow:.2f}x its peers{among} on {k} "
               f"of its last {seen} steps (peers: {pattern.peer_rate:.1%} of theirs), {ratio:.2f}x on average, "
               f"since step {first_step} (a flaky device or host)")
    return _alert(job, group, rank, node, first_step, step, ratio, critical_ratio, summary, evidence)


def data_wait_alert(job: str, group: str, rank: int, node: str | None, step: GroupStep, *, rank_wait: float,
                    peer_wait: float, compute: float, window: int, ratio_threshold: float, z_threshold: float,
                    critical_ratio: float) -> Alert:
    """A rank that waited longer for its input data than its peers on each of the last ``window`` steps."""
    # How much longer this rank makes the step: its extra wait on top of a typical step.
    ratio = (compute + rank_wait) / (compute + peer_wait) if compute + peer_wait > 0 else float("nan")
    first_step = step.step - window + 1
    evidence = DataWaitEvidence(
        group=group or None, rank_median=_round(rank_wait), peer_median=_round(peer_wait),
        compute_median=_round(compute), ratio=_round(ratio), window=window, first_step=first_step,
        detected_step=step.step, ratio_threshold=ratio_threshold, z_threshold=z_threshold,
    ).to_dict()
    evidence.update(straggler_cost(evidence, step))  # what it costs the job (models/steps/cost.py)
    summary = (f"straggler: {_where(rank, node)} waits {rank_wait - peer_wait:.3f}s longer for input data than its "
               f"peers every step (data_time {evidence['rank_median']}s vs peer median {evidence['peer_median']}s), "
               f"making steps {ratio:.2f}x slower, since step {first_step}: input pipeline")
    return _alert(job, group, rank, node, first_step, step, ratio, critical_ratio, summary, evidence)


def still_slow_by(alert: Alert, history: RankHistory, slot: int, clean: int, *, ratio_threshold: float,
                  z_threshold: float) -> tuple[float, list] | None:
    """When the thresholds were raised since ``alert`` fired and its rank's recent steps are still slow
    by the thresholds it fired with: (their median ratio, [(setting, old, new)]); else None."""
    ev = alert.evidence
    old_ratio, old_z = ev.get("ratio_threshold"), ev.get("z_threshold")
    if not isinstance(old_ratio, (int, float)) or not isinstance(old_z, (int, float)):
        return None
    raised = [(name, old, new) for name, old, new in (("ratio_threshold", old_ratio, ratio_threshold),
                                                       ("z_threshold", old_z, z_threshold)) if new > old]
    if not raised:
        return None
    recent = history.recent(min(clean, history.ratio.shape[1]))
    r, z = history.ratio[slot, recent], history.z[slot, recent]
    ok = ~np.isnan(r)
    if not ok.any():
        return None
    slow = (r[ok] >= old_ratio) & (z[ok] >= old_z)
    if 2 * int(slow.sum()) < int(ok.sum()):
        return None  # mostly clean by the old thresholds too: it recovered
    return float(np.median(r[ok])), raised


def recovered(alert: Alert, rank: int, step: GroupStep, clean: int, still: tuple[float, list] | None) -> Alert:
    """``alert`` resolved after ``clean`` clean steps (``still``: from ``still_slow_by``)."""
    evidence = dict(alert.evidence)
    evidence.update(resolved_step=step.step, clean_steps=clean)
    if still is not None:  # clean only because the thresholds were raised while it fired
        changed = ", ".join(f"straggler.{name} {old:g} -> {new:g}" for name, old, new in still[1])
        evidence.update(resolution=Resolution.THRESHOLD_CHANGED, resolution_detail=changed,
                        recent_ratio=_round(still[0]))
        summary = (f"resolved: threshold changed ({changed}); rank {rank} is still {still[0]:.2f}x its peers, "
                   f"no longer a straggler by the new threshold ({alert.summary})")
    else:
        evidence["resolution"] = Resolution.RECOVERED
        summary = (f"resolved: rank {rank} back in line with its peers since step "
                   f"{step.step - clean + 1} ({alert.summary})")
    return alert.resolved(at=step.ts, summary=summary, evidence=evidence)


def ended(alert: Alert, *, at: float, reason: str) -> Alert:
    """``alert`` resolved because its job ended."""
    return with_resolution(alert.resolved(at=at, summary=f"resolved ({reason}): {alert.summary}"),
                           Resolution.JOB_ENDED, reason)
