"""GPU samples and Xid events through NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``).

Every reading is tolerant: a field the GPU or driver does not support (an ``NVMLError``,
e.g. ``NVMLError_NotSupported`` for ECC on a consumer GPU or NVLink on a PCIe card) is left
out of the event and named once in :attr:`NvmlSampler.unsupported`. The ``nvml`` module
can be replaced (tests use a stand-in at the ``pynvml`` function boundary).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("stepwatch.agent.nvml")

MAX_NVLINKS = 18  # NVLink 4 (H100) has 18; the loop stops at the first unsupported link


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSampler:
    def __init__(self, node: str, *, nvml: Any = None) -> None:
        self.node = node
        self._nvml = nvml
        self.handles: list[Any] = []
        self.uuids: list[str | None] = []
        self.bus_ids: list[str | None] = []
        self.unsupported: set[str] = set()
        self.available = False
        self.reason: str | None = None
        self._events = None
        self._nvlinks: dict[int, int] = {}  # gpu -> links that answered

    # -- setup -------------------------------------------------------------------------------

    def start(self) -> bool:
        """Initialise NVML; False (with :attr:`reason`) where there is no NVML or no GPU."""
        try:
            if self._nvml is None:
                import pynvml  # noqa: PLC0415

                self._nvml = pynvml
        except ImportError:
            self.reason = "the nvidia-ml-py package is not installed (pip install 'stepwatch[agent]')"
            return False
        nv = self._nvml
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            self.reason = f"NVML unavailable: {exc}"
            return False
        if count == 0:
            self.reason = "NVML found no GPU"
            return False
        for i in range(count):
            handle = nv.nvmlDeviceGetHandleByIndex(i)
            self.handles.append(handle)
            self.uuids.append(self._get("uuid", lambda: _text(nv.nvmlDeviceGetUUID(handle))))
            pci = self._get("pci", lambda: nv.nvmlDeviceGetPciInfo(handle))
            self.bus_ids.append(_text(pci.busId) if pci is not None else None)
        self.available = True
        return True

    def close(self) -> None:
        if not self.available:
            return
        nv = self._nvml
        try:
            if self._events is not None:
                nv.nvmlEventSetFree(self._events)
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass
        self.available = False

    def _get(self, name: str, fn):
        try:
            return fn()
        except self._nvml.NVMLError as exc:
            if name not in self.unsupported:
                self.unsupported.add(name)
                log.info("NVML: %s not available: %s", name, exc)
            return None

    # -- samples -----------------------------------------------------------------------------

    def sample(self, ts: float) -> list[dict]:
        """One ``gpu`` event per GPU (raw cumulative counters)."""
        return [self.sample_gpu(i, ts) for i in range(len(self.handles))]

    def sample_gpu(self, index: int, ts: float) -> dict:
        nv, h, get = self._nvml, self.handles[index], self._get
        event: dict[str, Any] = {"v": 1, "kind": "gpu", "node": self.node, "ts": round(ts, 6), "gpu": index}
        if self.uuids[index]:
            event["uuid"] = self.uuids[index]
        if self.bus_ids[index]:
            event["pci_bus_id"] = self.bus_ids[index]
        util = get("utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            event["util"], event["mem_util"] = float(util.gpu), float(util.memory)
        mem = get("memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            event["mem_used"], event["mem_total"] = int(mem.used), int(mem.total)
        fields = {
            "temp": ("temperature", lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
            "power": ("power", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            "power_limit": ("power limit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
            "sm_clock": ("SM clock", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            "sm_clock_max": ("max SM clock", lambda: float(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))),
            "throttle": ("clock throttle reasons", lambda: int(self._throttle(h))),
            "ecc_sbe": ("ECC", lambda: int(nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC))),
            "ecc_dbe": ("ECC", lambda: int(nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC))),
            "pcie_gen": ("PCIe generation", lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h))),
            "pcie_gen_max": ("PCIe generation", lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h))),
            "pcie_width": ("PCIe width", lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h))),
            "pcie_width_max": ("PCIe width", lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h))),
        }
        for key, (name, fn) in fields.items():
            if name in self.unsupported:
                continue
            value = get(name, fn)
            if value is not None:
                event[key] = value
        links = self._nvlink_sample(index, h)
        if links:
            event["nvlinks"] = links
        return event

    def _throttle(self, h) -> int:
        nv = self._nvml
        newer = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)  # renamed in newer drivers
        if newer is not None:
            try:
                return newer(h)
            except nv.NVMLError:
                pass
        return nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)

    def _nvlink_sample(self, index: int, h) -> list[dict]:
        nv = self._nvml
        if "NVLink" in self.unsupported:
            return []
        known = self._nvlinks.get(index)
        out = []
        for link in range(known if known is not None else MAX_NVLINKS):
            try:
                up = nv.nvmlDeviceGetNvLinkState(h, link) == nv.NVML_FEATURE_ENABLED
            except nv.NVMLError:
                break  # links are numbered from 0: the first that does not answer ends the list
            entry: dict[str, Any] = {"link": link, "up": bool(up)}
            for key, counter in (("replay_errors", "NVML_NVLINK_ERROR_DL_REPLAY"),
                                 ("recovery_errors", "NVML_NVLINK_ERROR_DL_RECOVERY"),
                                 ("crc_errors", "NVML_NVLINK_ERROR_DL_CRC_FLIT")):
                try:
                    entry[key] = int(nv.nvmlDeviceGetNvLinkErrorCounter(h, link, getattr(nv, counter)))
                except nv.NVMLError:
                    pass
            out.append(entry)
        if known is None:
            self._nvlinks[index] = len(out)
            if not out:
                self.unsupported.add("NVLink")
        if out and "NVLink throughput" not in self.unsupported:
            self._nvlink_bytes(h, out)
        return out

    def _nvlink_bytes(self, h, links: list[dict]) -> None:
        nv = self._nvml
        ids = []
        for entry in links:
            ids.append((nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, entry["link"]))
            ids.append((nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, entry["link"]))
        values = self._get("NVLink throughput", lambda: nv.nvmlDeviceGetFieldValues(h, ids))
        if values is None:
            return
        for i, value in enumerate(values):
            if getattr(value, "nvmlReturn", 0) != 0:
                continue
            entry = links[i // 2]
            # Throughput fields are KiB counters (NVML docs); sent as bytes.
            entry["tx_bytes" if i % 2 == 0 else "rx_bytes"] = int(value.value.ullVal) * 1024

    # -- Xid events --------------------------------------------------------------------------

    def watch_xids(self) -> bool:
        """Register for critical Xid events on every GPU; False where no GPU supports them."""
        nv = self._nvml
        try:
            self._events = nv.nvmlEventSetCreate()
        except nv.NVMLError as exc:
            self.unsupported.add("Xid events")
            log.info("NVML: no event set: %s", exc)
            return False
        registered = 0
        for i, h in enumerate(self.handles):
            try:
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, self._events)
                registered += 1
            except nv.NVMLError as exc:
                log.info("NVML: GPU %d cannot report Xid events: %s", i, exc)
        if not registered:
            self.unsupported.add("Xid events")
        return registered > 0

    def wait_xid(self, timeout_ms: int, now) -> list[dict]:
        """Block up to ``timeout_ms`` for Xid events; return them as ``xid`` events (empty on timeout)."""
        nv = self._nvml
        if self._events is None:
            return []
        try:
            data = nv.nvmlEventSetWait_v2(self._events, timeout_ms)
        except nv.NVMLError:  # NVMLError_Timeout: nothing happened
            return []
        if data.eventType != nv.nvmlEventTypeXidCriticalError:
            return []
        try:
            gpu = int(nv.nvmlDeviceGetIndex(data.device))
        except nv.NVMLError:
            gpu = 0
        event = {"v": 1, "kind": "xid", "node": self.node, "ts": round(now(), 6), "gpu": gpu,
                 "xid": int(data.eventData)}
        if gpu < len(self.uuids) and self.uuids[gpu]:
            event["uuid"] = self.uuids[gpu]
        return [event]
