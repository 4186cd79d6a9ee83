"""The closed vocabulary of alert types the worker emits (``Alert.type``, ``labels.alertname`` without
its ``stepwatch_`` prefix): what ``stepwatch alerts --type`` offers and the runbooks cover."""

from __future__ import annotations

from enum import Enum


class AlertType(str, Enum):
    STRAGGLER = "straggler"  # models/straggler.py, models/long_straggler.py
    HANG = "hang"  # models/hang.py
    THROUGHPUT_DROP = "throughput_drop"  # models/throughput.py
    COMM_SLOWDOWN = "comm_slowdown"  # models/comm.py
    CHECKPOINT_STALE = "checkpoint_stale"  # models/checkpoint.py
    IMBALANCE = "imbalance"  # models/imbalance.py
    JOB_RESTART = "job_restart"  # models/oncall.py
    NODE_SUSPECT = "node_suspect"  # models/ledger.py
    GPU_FAULT = "gpu_fault"  # models/telemetry_tracker.py (Xid, ECC)
    LINK_ERRORS = "link_errors"  # models/telemetry_tracker.py (InfiniBand/RoCE ports)
    FABRIC = "fabric"  # models/incidents.py (many nodes' ports erring together: one fabric incident)
    GPU_IDLE = "gpu_idle"  # models/device_rules.py
    GPU_HOT = "gpu_hot"  # models/device_rules.py
    HBM_FULL = "hbm_full"  # models/device_rules.py


ALERT_TYPES: tuple[str, ...] = tuple(t.value for t in AlertType)
