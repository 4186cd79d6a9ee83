"""Text for a terminal: control characters escaped, so a name in an alert cannot print a fake line or move the
cursor. Light (``re``, ``orjson``): the commands and ``stepwatch replay`` (stepwatch/recording.py) share it."""

from __future__ import annotations

import re

import orjson


def printable(text: object) -> str:
    """``text`` safe for a terminal: control characters (C0, DEL, C1, line and paragraph separators, bidi
    overrides) as Python escapes, so a job named ``x\\n... RESOLVED`` or with ``\\x1b[`` cannot print a fake
    line or move the cursor (issue 27 item 10)."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in s)


#: What JSON leaves raw but a terminal may act on: C1 controls, line/paragraph separators, bidi controls.
_JSON_UNSAFE = re.compile("[\u0080-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def json_line(obj: object) -> str:
    """``obj`` as one JSON line that is safe on a terminal (JSON already escapes C0 controls; the rest are only
    ever inside strings, where a ``\\uXXXX`` escape means the same)."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode())
