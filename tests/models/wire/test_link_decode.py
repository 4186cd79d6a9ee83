"""A link sample decodes the same by the usual-sample road and by the field checks: the same event, or the same
one-line reason (models/wire/telemetry_events.py ``_parse_link``, ``_counters``)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepwatch.models.wire.events import parse_event
from stepwatch.models.wire.telemetry_events import _LINK_FIELDS, LinkEvent
from stepwatch.models.wire.wire import MAX_NAME_LEN, InvalidEvent, _extra, _int, _num, _str


def _checked(o: dict) -> LinkEvent:
    """The field checks alone, in the order the event's fields are made (the road before the usual-sample one)."""
    fields = dict(node=_str(o, "node", required=True), ts=_num(o, "ts", required=True),
                  device=_str(o, "device", required=True), port=_int(o, "port", required=True),
                  state=_str(o, "state", required=False), phys_state=_str(o, "phys_state", required=False),
                  rate=_num(o, "rate", required=False), link_layer=_str(o, "link_layer", required=False),
                  netdev=_str(o, "netdev", required=False))
    value = o.get("counters")
    counters: dict[str, int] = {}
    if value is not None:
        if not isinstance(value, dict):
            raise InvalidEvent("'counters' must be an object of name -> integer")
        for name in value:
            if not isinstance(name, str) or not name or len(name) > MAX_NAME_LEN:
                raise InvalidEvent("counter names must be non-empty strings")
            count = value[name]
            if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < 2**64:
                raise InvalidEvent(f"counter {name!r} must be a non-negative 64-bit integer")
            counters[name] = count
    return LinkEvent(**fields, counters=counters, extra=_extra(o, _LINK_FIELDS))


def _outcome(parse, o: dict):
    try:
        ev = parse(o)
    except InvalidEvent as exc:
        return "invalid", str(exc)
    # repr: NaN-free by the checks; types matter (an int ts or rate is made a float)
    return "ok", repr(ev), ev.counters, ev.extra, [type(getattr(ev, f)) for f in ("ts", "port", "rate")]


odd = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**65), st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=3), st.just("x" * (MAX_NAME_LEN + 1)), st.lists(st.integers(), max_size=1))
names = st.one_of(st.sampled_from(["symbol_error", "port_xmit_data", ""]), st.text(max_size=4), st.integers(0, 3),
                  st.just("c" * (MAX_NAME_LEN + 1)))
counts = st.one_of(st.integers(0, 2**64 - 1), st.integers(-3, 2**65), st.booleans(), st.floats(0, 10), st.none())
usual = {"v": 1, "kind": "link", "node": "srv-001", "ts": 1_764_000_000.25, "device": "mlx5_0", "port": 1,
         "state": "ACTIVE", "phys_state": "LinkUp", "rate": 400.0, "link_layer": "InfiniBand",
         "counters": {"port_xmit_data": 10**12, "symbol_error": 0}}


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted(_LINK_FIELDS - {"v", "kind", "counters"}) + ["extra"]), odd,
                       max_size=3),
       st.one_of(st.none(), st.dictionaries(names, counts, max_size=4), odd), st.booleans())
def test_both_roads_agree(changes, counters, drop_counters):
    o = {**usual, **changes}
    if drop_counters:
        o.pop("counters")
    elif counters is not None:
        o["counters"] = counters
    assert _outcome(parse_event, o) == _outcome(_checked, o)


def test_the_usual_sample_keeps_a_counters_dict_of_its_own():
    ev = parse_event(usual)
    assert ev.counters == usual["counters"] and ev.counters is not usual["counters"]
