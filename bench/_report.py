"""Shared helpers of the benchmarks: the machine line and BENCHMARKS.md section updates."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "BENCHMARKS.md"

HEADER = """# stepwatch benchmarks

Latest results of the benchmark commands in `bench/` (see `bench/README.md`). Each section is
rewritten by its command; ratios are measured side by side in one run on the same machine, absolute
times are context only.
"""

ORDER = ("quality", "steady", "traces", "throughput")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    return f"{os.cpu_count()} CPUs (`nproc`: {_nproc()}), {cpu_model()}, Python {platform.python_version()}"


def _nproc() -> str:
    try:
        return subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(os.cpu_count())


def stamp(command: str) -> str:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"- Date: {now}\n- Machine: {machine()}\n- Command: `{command}`\n"


def update_section(key: str, markdown: str, path: Path = BENCHMARKS) -> None:
    """Replace (or add) the section between ``<!-- key:start -->`` and ``<!-- key:end -->``."""
    text = path.read_text() if path.exists() else HEADER
    block = f"<!-- {key}:start -->\n{markdown.rstrip()}\n<!-- {key}:end -->"
    pattern = re.compile(rf"<!-- {re.escape(key)}:start -->.*?<!-- {re.escape(key)}:end -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        # Keep the sections in a fixed order: insert before the first later one present.
        later = [k for k in ORDER[ORDER.index(key) + 1:]] if key in ORDER else []
        for k in later:
            marker = f"<!-- {k}:start -->"
            if marker in text:
                text = text.replace(marker, block + "\n\n" + marker, 1)
                break
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
