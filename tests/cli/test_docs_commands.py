"""Every ``stepwatch ...`` command that README.md, docs/ and docs/runbooks/ show runs as shown (issue 43 item 1).

The commands are extracted from the Markdown itself: lines of fenced or indented code blocks (``$ `` prompts,
``VAR=value`` prefixes and ``\\`` continuations understood) and inline code spans. A command in a block, or an
inline one with arguments, must parse with the real parser; an inline mention of a bare command or option
(``stepwatch agent --topology``) must name a command and options that exist. A synopsis (``[JOB]``, ``...``,
``set/unset``) is checked for its options only. The ones that end on their own and touch nothing but the test's
topics and a scratch directory then run, in the order the page shows them, against the test broker.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

#: Typed placeholders a page writes in capitals, with a value of their type (a string placeholder parses as is).
PLACEHOLDERS = {"N": "4", "NODE:SECONDS": "node-001:2", "SECONDS": "10"}

#: Fences whose lines are shell commands (and their output); ```text, ```json, ```python ... are not.
SHELL_FENCES = {"", "bash", "sh", "console", "shell"}

_ENV = re.compile(r"[A-Z_][A-Z0-9_]*=\S*")


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    inline: bool
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def doc_commands() -> list[DocCommand]:
    from stepwatch.cli import build_parser

    names = _subcommands(build_parser())
    head = re.compile(r"(?:%s\s+)*stepwatch\s+([a-z_-]+)" % _ENV.pattern)
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        fenced, shell, i = False, True, 0
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith("```"):
                fenced = not fenced
                shell = line.strip()[3:] in SHELL_FENCES  # a diagram (```text) or code shows no commands
            elif fenced and not shell:
                pass
            elif fenced or line.startswith("    "):
                text = line.strip().removeprefix("$ ")
                m = head.match(text)
                if m and m.group(1) in names and not text[m.end():].startswith(":"):  # not an output line
                    start = i
                    while text.endswith("\\") and i + 1 < len(lines):
                        i += 1
                        text = text[:-1].rstrip() + " " + lines[i].strip()
                    found.append(DocCommand(str(page.relative_to(REPO)), start + 1, False, text))
            else:
                for m in re.finditer(r"`([^`]*)`", line):
                    span = m.group(1).strip()
                    h = head.match(span)
                    if h and h.group(1) in names and not span[h.end():].startswith(":"):
                        found.append(DocCommand(str(page.relative_to(REPO)), i + 1, True, span))
            i += 1
    return found


def words_of(text: str) -> tuple[list[str], dict[str, str], str | None, bool]:
    """(argv after ``stepwatch``, environment prefix, stdout redirect target, runs in the background)."""
    text = re.sub(r"\s+#\s.*$", "", text).strip()  # a trailing comment
    background = text.endswith("&")
    text = text.rstrip("& ")
    redirect = None
    if " > " in text:
        text, redirect = (part.strip() for part in text.split(" > ", 1))
    words = shlex.split(text)
    env = {}
    while words and _ENV.fullmatch(words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    assert words[0] == "stepwatch"
    return [PLACEHOLDERS.get(w, w) for w in words[1:]], env, redirect, background


def _final_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The subparser ``argv`` reaches and the words after its name."""
    from stepwatch.cli import build_parser

    parser, rest = build_parser(), list(argv)
    while rest and rest[0] in (subs := _subcommands(parser)):
        parser = subs[rest.pop(0)]
    return parser, rest


def _synopsis(text: str) -> bool:
    """Optional parts, repetition or alternatives in the command itself (not its comment)."""
    return any(mark in re.sub(r"\s+#\s.*$", "", text) for mark in ("[", "...", "/unset", "|"))


def problem(cmd: DocCommand) -> str | None:
    """Why ``cmd`` does not run as shown (None: it does)."""
    argv, _env, _redirect, _bg = words_of(cmd.text)
    parser, rest = _final_parser(argv)
    if parser.prog == "stepwatch":
        return f"no command {argv[0]!r}"
    options = {o for a in parser._actions for o in a.option_strings}
    for word in rest:
        if word.startswith("--") and word.split("=", 1)[0] not in options:
            return f"{parser.prog} has no option {word.split('=', 1)[0]}"
    synopsis = _synopsis(cmd.text)
    takes_value = {o for a in parser._actions if a.nargs != 0 for o in a.option_strings}
    mention = cmd.inline and (not rest or rest[-1] in takes_value)  # "`stepwatch agent --topology`" names it
    if synopsis or mention:
        return None
    err = io.StringIO()
    from stepwatch.cli import build_parser

    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            return err.getvalue().strip().splitlines()[-1]
    return None


def test_the_pages_show_commands():
    commands = doc_commands()
    assert len(commands) > 80
    assert {c.page for c in commands} >= {"README.md", "docs/runbooks/README.md", "docs/operations.md"}
    # The runbook's incident command is among them, the way the issue found it.
    assert any(c.text.startswith("stepwatch record --job JOB --since 30m") for c in commands)


def test_every_command_the_docs_show_parses():
    failures = [f"{c}  ->  {why}" for c in doc_commands() if (why := problem(c))]
    assert failures == [], "\n".join(failures)


def test_a_typo_in_a_shown_command_is_caught():
    """The check itself: a wrong option or value in a page is reported, a mention is not."""
    assert problem(DocCommand("x.md", 1, True, "stepwatch record --job JOB --since 30q"))
    assert problem(DocCommand("x.md", 1, False, "stepwatch replay --no-such run.jsonl"))
    assert problem(DocCommand("x.md", 1, True, "stepwatch agent --no-such-option"))
    assert problem(DocCommand("x.md", 1, False, "stepwatch replay")) == (
        "stepwatch replay: error: the following arguments are required: FILE")
    assert problem(DocCommand("x.md", 1, True, "stepwatch replay")) is None
    assert problem(DocCommand("x.md", 1, True, "stepwatch agent --topology")) is None


# -- running the safe ones ------------------------------------------------------------------------------

#: Shown as failing on purpose, with the exit status the page gives.
EXPECTED_EXIT = {"stepwatch config set hang.timeout_seconds=inf": 2, "stepwatch config set hang.timeout_seconds=0": 2}

#: Commands that end on their own and write only to the test's topics and the scratch directory.
SAFE = {"simulate", "replay", "record", "report", "publish", "scenarios", "alerts", "config"}


def runnable(cmd: DocCommand) -> bool:
    argv, _env, _redirect, background = words_of(cmd.text)
    if background or argv[0] not in SAFE or problem(cmd) is not None:
        return False
    if _synopsis(cmd.text):
        return False
    if any(re.search(r"\b(?!JOB\b)[A-Z]{3,}\b", w) for w in argv):  # hang.FIELD=VALUE, --write DIR NAME
        return False
    if argv[0] == "simulate" and "--out" not in argv:  # to the broker it runs in real time: parsed only
        return False
    _parser, rest = _final_parser(argv)
    if cmd.inline and not rest:  # a mention ("`stepwatch replay`") is not a command to run
        return argv[:2] == ["config", "show"]
    return True


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """The files the pages use without making them: a simulated fleet and its alerts."""
    d = tmp_path_factory.mktemp("docs-commands")
    env = _env()
    subprocess.run([sys.executable, "-m", "stepwatch.cli", "simulate", "--ranks", "16", "--steps", "120",
                    "--straggler", "3:30:1.5:100", "--out", str(d / "fleet.jsonl")], check=True, cwd=d, env=env,
                   capture_output=True, timeout=120)
    with open(d / "alerts.jsonl", "wb") as out:
        subprocess.run([sys.executable, "-m", "stepwatch.cli", "replay", "fleet.jsonl"], stdout=out, check=True,
                       cwd=d, env=env, stderr=subprocess.DEVNULL, timeout=120)
    return d


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPWATCH_", "KAFKA_"))}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO), **extra)
    return env


def _run_in_process(argv: list[str], *, env: dict[str, str], cwd: Path, stdout: Path | None, monkeypatch
                    ) -> tuple[int, str]:
    """``stepwatch ARGV`` through ``stepwatch.cli.main`` in this process (a subprocess each would cost more
    than the commands): its exit status and stderr."""
    from stepwatch.cli import main

    err = io.StringIO()
    out = open(stdout, "w") if stdout else io.TextIOWrapper(io.BytesIO(), write_through=True)
    with monkeypatch.context() as m, contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        for key in [k for k in os.environ if k.startswith(("STEPWATCH_", "KAFKA_"))]:
            m.delenv(key)
        for key, value in env.items():
            m.setenv(key, value)
        m.chdir(cwd)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            if isinstance(exc.code, str):
                err.write(exc.code)
        except Exception:  # a traceback is a failure the test reports, not one that stops it
            import traceback

            code = 1
            err.write("Traceback:\n" + traceback.format_exc())
        finally:
            out.flush()
            if stdout:
                out.close()
    return code, err.getvalue()


@pytest.mark.kafka
def test_the_safe_commands_the_docs_show_run_as_shown(kafka_bootstrap, topic_prefix, scratch, monkeypatch):
    """In page order (a page's ``simulate --out run.jsonl`` makes the file its ``replay run.jsonl`` reads), with
    the test broker for any broker the page names, and a job the page names given events to find."""
    from support import stepwatch_env

    base = {k: v for k, v in stepwatch_env(kafka_bootstrap, topic_prefix).items()
            if k.startswith(("STEPWATCH_", "KAFKA_"))}
    for job in ("llm-70b", "JOB"):  # `record --job llm-70b --since ...` finds that job's events
        code, err = _run_in_process(["simulate", "--job", job, "--ranks", "4", "--steps", "5", "--compute-time",
                                     "0.01"], env=base, cwd=scratch, stdout=None, monkeypatch=monkeypatch)
        assert code == 0, err
    ran, failures = [], []
    for cmd in filter(runnable, doc_commands()):
        argv, env, redirect, _bg = words_of(cmd.text)
        if "--bootstrap" in argv:
            argv[argv.index("--bootstrap") + 1] = kafka_bootstrap
        if argv[0] == "alerts":  # follows for good, or a page's own quiet time (60 s): 1 s here, as parsed above
            if "--timeout" in argv:
                argv[argv.index("--timeout") + 1] = "1"
            else:
                argv += ["--timeout", "1"]
        code, err = _run_in_process(argv, env={**base, **env}, cwd=scratch,
                                    stdout=scratch / redirect if redirect else None, monkeypatch=monkeypatch)
        ran.append(cmd)
        if code != EXPECTED_EXIT.get(cmd.text, 0) or "Traceback" in err:
            failures.append(f"{cmd}  ->  exit {code}: {err[-600:]}")
    assert failures == [], "\n".join(failures)
    runs = {words_of(c.text)[0][0] for c in ran}
    assert runs >= {"simulate", "replay", "record", "report", "publish", "alerts", "config"}, runs
