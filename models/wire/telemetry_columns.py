"""Column-wise decoding of node agents' envelopes of link samples (the telemetry fast path): :class:`LinkColumns`.

A node agent sends its InfiniBand/RoCE ports' samples together, one batch envelope every few seconds; a fleet's
telemetry is mostly these. Building and checking one ``LinkEvent`` per sample cost more than the node rules'
usual work on it, so an envelope whose every item is a plain, valid link sample (the agent's usual: every field
of its exact type and in range, no extra fields) is decoded field by field, with C-level checks per column, and
the node rules take the batch's samples (each node's run in turn) in one call (``TelemetryHub.process_links``). Anything else (a
sample of another kind, a bad field, an extra field, an integer timestamp) returns None: the envelope takes the
per-event decoder, which keeps the good samples and dead-letters each bad one with its one-line reason.
"""

from __future__ import annotations

from itertools import chain
from operator import itemgetter

from .telemetry_events import _COUNTER_TOP, _LINK_FIELDS, MAX_COUNTERS, LinkEvent
from .wire import _MAX_FLOAT, MAX_BATCH_EVENTS, MAX_COUNTER, MAX_NAME_LEN, WIRE_VERSION


class LinkRow(tuple):
    """One link sample with ``LinkEvent``'s field names, as a tuple ``(node, ts, device, port, state, phys_state,
    rate, counters)``: what the node rules hand their helpers for a spike or an alert, without building an event."""

    __slots__ = ()
    kind = "link"
    node = property(itemgetter(0))
    ts = property(itemgetter(1))
    device = property(itemgetter(2))
    port = property(itemgetter(3))
    state = property(itemgetter(4))
    phys_state = property(itemgetter(5))
    rate = property(itemgetter(6))
    counters = property(itemgetter(7))


class LinkColumns:
    """The link samples of one envelope (or of a replay's run of envelopes), column by column, in message order (what ``DetectionEngine.process_batch``
    reads). ``counters``: each sample's counter object as parsed (read, never changed); ``event(i)`` gives the
    ``LinkEvent`` the per-event decoder returns for sample ``i``."""

    __slots__ = ("node", "ts", "device", "port", "state", "phys_state", "rate", "link_layer", "netdev", "counters",
                 "_events")

    kind = "link"

    def __len__(self) -> int:
        return len(self.ts)

    def event(self, i: int) -> LinkEvent:
        return LinkEvent(self.node[i], self.ts[i], self.device[i], self.port[i], self.state[i], self.phys_state[i],
                         self.rate[i], self.link_layer[i], self.netdev[i], dict(self.counters[i]), {})

    def events(self) -> list[LinkEvent]:
        if self._events is None:
            self._events = [self.event(i) for i in range(len(self.ts))]
        return self._events

    def node_runs(self) -> list[tuple[str, int, int]]:
        """``(node, start, end)`` of each run of consecutive samples of one node (an agent's envelope: one run)."""
        nodes = self.node
        first = nodes[0]
        if nodes.count(first) == len(nodes):
            return [(first, 0, len(nodes))]
        out, start = [], 0
        for i in range(1, len(nodes)):
            if nodes[i] != nodes[i - 1]:
                out.append((nodes[start], start, i))
                start = i
        out.append((nodes[start], start, len(nodes)))
        return out


def _names(values, optional: bool) -> bool:
    """Every value a name (a non-empty string of at most MAX_NAME_LEN characters), or None where ``optional``."""
    distinct = set(values)  # (a column repeats a few names: each checked once)
    if optional:
        distinct.discard(None)
        if not distinct:
            return True
    return set(map(type, distinct)) == {str} and min(map(len, distinct)) > 0 and max(map(len, distinct)) <= MAX_NAME_LEN


def _counters_ok(objs: list) -> bool:
    """Every sample's counters the agent's usual object: string names, non-negative 64-bit integers (checked over the
    whole batch at once: all the counts in one list, the distinct names in one set)."""
    if set(map(type, objs)) != {dict}:
        return False
    sizes = list(map(len, objs))
    if min(sizes) == 0 or max(sizes) > MAX_COUNTERS:
        return False
    counts = list(chain.from_iterable(map(dict.values, objs)))
    if set(map(type, counts)) != {int} or min(counts) < 0 or max(counts) >= _COUNTER_TOP:
        return False
    names = set(chain.from_iterable(objs))
    return set(map(type, names)) == {str} and min(map(len, names)) > 0 and max(map(len, names)) <= MAX_NAME_LEN


def _in_range(floats: list[float]) -> bool:
    """Every value in [0, the largest finite float] (NaN and infinity too are not: their sum is neither)."""
    total = sum(floats)
    return min(floats) >= 0.0 and total == total and total <= _MAX_FLOAT


def link_columns(items: list) -> LinkColumns | None:
    """Columns of an envelope's items when every one is a plain valid link sample (see the module doc), else None."""
    try:
        return _link_columns(items)
    except TypeError:  # e.g. an object where a name belongs (unhashable): the per-event decoder says why
        return None


def _link_columns(items: list) -> LinkColumns | None:
    n = len(items)
    if not n or set(map(type, items)) != {dict}:
        return None
    try:
        kinds, versions = list(map(itemgetter("kind"), items)), list(map(itemgetter("v"), items))
    except KeyError:
        return None
    if kinds.count("link") != n or set(map(type, versions)) != {int} or versions.count(WIRE_VERSION) != n:
        return None
    keys = set().union(*items)
    if not keys <= _LINK_FIELDS:
        return None  # extra fields are kept per event: the per-event decoder does that
    for name in ("node", "ts", "device", "port", "counters"):
        if name not in keys:
            return None

    def col(name: str) -> list:
        try:
            return list(map(itemgetter(name), items))
        except KeyError:
            return [o.get(name) for o in items]

    c = LinkColumns()
    c._events = None
    c.node, c.device, c.ts, c.port = col("node"), col("device"), col("ts"), col("port")
    if not _names(c.node, False) or not _names(c.device, False):
        return None
    if set(map(type, c.ts)) != {float} or not _in_range(c.ts):
        return None  # (an integer or out-of-range time: the per-event decoder's reasons)
    if set(map(type, c.port)) != {int} or min(c.port) < 0 or max(c.port) > MAX_COUNTER:
        return None
    none = [None] * n
    for name in ("state", "phys_state", "link_layer", "netdev"):
        values = col(name) if name in keys else none
        if values is not none and not _names(values, True):
            return None
        setattr(c, name, values)
    c.rate = col("rate") if "rate" in keys else none
    if c.rate is not none:
        rates = [r for r in c.rate if r is not None]
        if rates and (set(map(type, rates)) != {float} or not _in_range(rates)):
            return None
    c.counters = col("counters")
    if not _counters_ok(c.counters):
        return None
    return c


def link_columns_of(obj) -> LinkColumns | None:
    """The columns of a parsed batch envelope of plain valid link samples (``link_columns``), else None (any other
    message: the per-event decoder)."""
    if type(obj) is not dict or obj.get("kind") != "batch" or obj.get("v") != WIRE_VERSION:
        return None
    items = obj.get("events")
    if type(items) is not list or not 0 < len(items) <= MAX_BATCH_EVENTS or type(items[0]) is not dict \
            or items[0].get("kind") != "link":
        return None
    return link_columns(items)
