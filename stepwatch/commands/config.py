"""``stepwatch config set|unset|show``: runtime detector settings in the config topic."""

from __future__ import annotations

import argparse
import sys

import orjson

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _settings


def run(args: argparse.Namespace) -> int:
    from stepwatch.models.shadow import SHADOW_KEY
    from stepwatch.runtime_config import (GLOBAL, WORKER_SECTIONS, parse_assignments, read_topic, validate_all,
                                          write_topic)

    settings = _settings(args)
    _require_bootstrap(settings)
    if getattr(args, "shadow", False) or args.config_command == "promote-shadow":
        from stepwatch.commands.shadow import run_shadow  # candidate settings (stepwatch/commands/shadow.py)

        return run_shadow(args, settings)
    key = args.job or GLOBAL
    if args.config_command == "show":
        scopes = read_topic(settings)
        from stepwatch.commands.shadow import take_shadow

        shadow = take_shadow(scopes)  # the candidate's scope is shown apart (never a job's)
        if args.job:
            scopes = {k: v for k, v in scopes.items() if k == args.job}
        if args.json:  # the topic's content as it is; a refused scope is said on stderr (the JSON keeps its shape)
            print(orjson.dumps({**scopes, **({"shadow": shadow} if shadow else {})},
                               option=orjson.OPT_INDENT_2).decode())
            for scope in sorted(scopes):
                refused = _refused(scope, scopes[scope])
                if refused:
                    print(f"stepwatch config: job {scope}: refused by the workers ({', '.join(refused)} set for "
                          f"'*' only)", file=sys.stderr)
            return 0
        if not scopes:
            print("no runtime settings: every job uses the worker's own settings")
        if shadow:
            print("shadow (on trial, not live): " + ", ".join(
                f"{sec}.{k}={v}" for sec, kv in shadow.items() for k, v in sorted(kv.items())))
        for scope in sorted(scopes, key=lambda k: (k != GLOBAL, k)):
            name = "all jobs (*)" if scope == GLOBAL else f"job {scope}"
            values = ", ".join(f"{sec}.{k}={v}" for sec, kv in scopes[scope].items() for k, v in sorted(kv.items()))
            refused = _refused(scope, scopes[scope])
            # Written raw to the topic (``set --job`` refuses them): the workers refuse the whole message.
            print(f"{name}: {values}" + (f" (refused by the workers: {', '.join(refused)} set for '*' only)"
                                         if refused else ""))
        return 0
    changes = parse_assignments(args.assignments) if args.config_command == "set" else {}
    if key == SHADOW_KEY:
        raise ValueError(f"{SHADOW_KEY!r} is the shadow settings' scope: use --shadow")
    current = read_topic(settings).get(key, {})
    refused = _refused(key, current)
    if refused:  # kept, they would make the workers refuse this scope's new message too
        current = {sec: kv for sec, kv in current.items() if sec not in WORKER_SECTIONS}
        print(f"stepwatch config: job {key}: dropped {', '.join(refused)} (the workers refused it: set for '*' "
              f"only)", file=sys.stderr)
    if args.config_command == "set":
        merged = {sec: dict(current.get(sec, {})) for sec in set(current) | set(changes)}
        for sec, kv in changes.items():
            merged[sec].update(kv)
        validate_all(merged, settings)  # what the workers would refuse never reaches the topic
    else:  # unset
        merged = {sec: dict(kv) for sec, kv in current.items()}
        for name in args.names:
            sec, dot, field = name.rpartition(".")
            merged.get(sec if dot else "straggler", {}).pop(field, None)
        if not args.names:
            merged = {}
    merged = {sec: kv for sec, kv in merged.items() if kv}
    write_topic(settings, key, merged or None)
    scope = "all jobs" if key == GLOBAL else f"job {key}"
    if merged:
        values = ", ".join(f"{sec}.{k}={v}" for sec, kv in merged.items() for k, v in sorted(kv.items()))
        print(f"stepwatch config: {scope}: {values} (workers apply it within seconds)")
    else:
        print(f"stepwatch config: {scope}: no runtime settings (back to the defaults)")
    return 0


def _refused(scope: str, overrides: dict) -> list[str]:
    """The worker-wide sections a job's scope names: the workers refuse such a message whole."""
    from stepwatch.runtime_config import GLOBAL, WORKER_SECTIONS

    return [] if scope == GLOBAL else sorted(set(overrides) & set(WORKER_SECTIONS))


def _check_assignments(args: argparse.Namespace) -> None:
    """A value out of range is refused before any broker is asked (stepwatch/cli.py runs this first)."""
    from stepwatch.runtime_config import WORKER_SECTIONS, parse_assignments

    sections = parse_assignments(args.assignments)  # each value in its field's range
    if getattr(args, "shadow", False) and args.job:
        raise ValueError("--shadow settings are tried for every job ('*'): drop --job")
    worker = sorted(set(sections) & set(WORKER_SECTIONS))
    if args.job and worker:
        raise ValueError(f"{', '.join(worker)}: the worker's node-level and outlet rules' settings, set for every "
                         f"job ('*') only: drop --job")


def runtime_fields_help() -> str:
    """Every field ``config set`` accepts, with its default and range (read from the settings classes)."""
    from stepwatch.models.tunable import runtime_fields, runtime_range
    from stepwatch.runtime_config import SECTIONS

    lines = ["runtime fields (SECTION.FIELD, default, range):"]
    for section, cls in SECTIONS.items():
        defaults = cls()
        for name in runtime_fields(cls):
            value = getattr(defaults, name)
            bounds = "" if isinstance(value, bool) else f"; {runtime_range(cls, name)}"
            lines.append(f"  {section}.{name} (default {value}{bounds})")
    return "\n".join(lines)


class _FieldsHelpParser(argparse.ArgumentParser):
    """``config set/unset --help`` ends with the runtime fields; built only when help is asked for, so other
    commands do not import the detectors' settings to start."""

    def format_help(self) -> str:
        text = super().format_help()
        if self.prog.endswith((" set", " unset")):
            text += "\n" + runtime_fields_help() + "\n"
        return text


def add_parser(sub) -> None:
    p = sub.add_parser("config", help="change detector settings of running workers (config topic)",
                       description="Runtime settings live in the compacted <prefix>config topic, keyed by job "
                                   "id or '*' (all jobs); workers apply them within seconds, no restart.")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True, parser_class=_FieldsHelpParser)
    c = csub.add_parser("set", help="set settings, e.g. straggler.ratio_threshold=1.2",
                        description="Set runtime settings for every job, or one job (--job); a bare FIELD means "
                                    "straggler.FIELD. A value out of range is refused with the reason.")
    _add_kafka_args(c)
    c.add_argument("--job", help="only this job (default: every job, '*')")
    c.add_argument("--shadow", action="store_true",
                   help="a candidate for every job, tried on the live stream: its alerts go to the shadow-alerts "
                        "topic only (compare with 'stepwatch report --shadow', make live with promote-shadow)")
    c.add_argument("assignments", nargs="+", metavar="SECTION.FIELD=VALUE",
                   help="one or more settings, e.g. straggler.ratio_threshold=1.2 hang.timeout_seconds=900")
    c.set_defaults(func=run, precheck=_check_assignments)
    c = csub.add_parser("unset", help="drop settings (all of the scope's without names)",
                        description="Drop runtime settings of every job's scope ('*') or one job's (--job): the "
                                    "named fields, or all of the scope's without names.")
    _add_kafka_args(c)
    c.add_argument("--job", help="only this job (default: every job, '*')")
    c.add_argument("--shadow", action="store_true", help="drop candidate settings instead (all without names)")
    c.add_argument("names", nargs="*", metavar="SECTION.FIELD", help="the settings to drop (default: all of them)")
    c.set_defaults(func=run)
    c = csub.add_parser("promote-shadow", help="make the shadow settings live (and clear the shadow)",
                        description="Merge the shadow (candidate) settings into every job's live settings ('*') "
                                    "in one step, then drop the shadow.")
    _add_kafka_args(c)
    c.set_defaults(func=run, job=None)
    c = csub.add_parser("show", help="print the settings in the config topic",
                        description="Print the runtime settings the config topic holds, per scope.")
    _add_kafka_args(c)
    c.add_argument("--job", help="only this job's")
    c.add_argument("--json", action="store_true", help="print them as JSON")
    c.set_defaults(func=run)
