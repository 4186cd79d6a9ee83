"""One store of the rules' settings, keyed by each rule's settings class (``RuleSpec.settings``).

Three layers per class, the later winning: the fleet's (the environment's tree, ``DetectionSettings``), the
run-time default (``stepwatch config set``, scope ``*``) and a job's own (``--job``). A class may adjust the
fleet's value per job with ``for_job(job)`` (the hang rule's start-up ``job_timeouts``); a run-time default
replaces it, as a job's own does. The engine keeps one store and reconfigures a job's rules from it through
one path (``DetectionEngine.apply_rule_settings``); stepwatch/runtime_config.py reads the same classes for the
config topic's keys, checks and the docs table, so a rule with its own settings is listed nowhere else.

What a settings class declares, all on the dataclass:

* its section: the name of its field in the tree (``straggler``, ``hang``, ...) or, for a class the tree does
  not hold, a ``SECTION`` class attribute;
* which fields change at run time and their ranges: ``runtime(...)`` on the field (models/tunable.py);
* rules across fields: an optional ``check()`` raising ``ValueError`` (``1 <= min_flagged <= window``).

Imports no detector: the store, like the tree, loads light.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from .settings import DetectionSettings


@functools.cache  # asked for each rule of each new job: the tree's fields are read once per class
def section_of(cls: type) -> str:
    """The section name of settings class ``cls``: its field in the tree, else its ``SECTION`` attribute."""
    for f in dataclasses.fields(DetectionSettings):
        if f.default_factory is cls:
            return f.name
    name = getattr(cls, "SECTION", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__name__}: a settings class the tree does not hold declares SECTION = 'name'")
    return name


def check(settings: Any) -> Any:
    """``settings``, after its class's own rules across fields (``check()``, if it has one); ``ValueError``
    saying why when they fail."""
    own = getattr(settings, "check", None)
    if callable(own):
        own()
    return settings


class SettingsStore:
    """The settings in force, per settings class and job: a job's own, else the run-time default, else the
    fleet's (adjusted by ``for_job``).

    >>> from stepwatch.models.steps.settings import StragglerSettings
    >>> store = SettingsStore(DetectionSettings())
    >>> store.set(StragglerSettings, "a", StragglerSettings(window=9))
    >>> store.get(StragglerSettings, "a").window, store.get(StragglerSettings, "b").window
    (9, 5)
    >>> store.set(StragglerSettings, None, StragglerSettings(window=7))
    >>> store.get(StragglerSettings, "a").window, store.get(StragglerSettings, "b").window
    (9, 7)
    """

    def __init__(self, fleet: Any) -> None:
        #: The environment's tree (a ``DetectionSettings`` or the process's ``Settings``).
        self.fleet = fleet
        self._defaults: dict[type, Any] = {}  # class -> the run-time default
        self._own: dict[type, dict[str, Any]] = {}  # class -> job -> the job's own

    def fleet_value(self, cls: type) -> Any:
        """The environment's settings of ``cls`` (its defaults where the tree holds no such section)."""
        value = getattr(self.fleet, section_of(cls), None)
        return value if isinstance(value, cls) else cls()

    def default(self, cls: type) -> Any:
        """The settings of ``cls`` every job without its own gets (the run-time default, else the fleet's)."""
        value = self._defaults.get(cls)
        return value if value is not None else self.fleet_value(cls)

    def get(self, cls: type, job: str) -> Any:
        """The settings of ``cls`` in force for ``job``."""
        own = self._own.get(cls, {}).get(job)
        if own is not None:
            return own
        value = self._defaults.get(cls)
        if value is not None:
            return value
        value = self.fleet_value(cls)
        for_job = getattr(value, "for_job", None)
        return for_job(job) if callable(for_job) else value

    def has_own(self, cls: type, job: str) -> bool:
        return job in self._own.get(cls, {})

    def set(self, cls: type, job: str | None, value: Any | None) -> None:
        """``job=None``: the run-time default of ``cls`` (it cannot be removed); else ``job``'s own, or with
        ``value=None`` none (back to the default)."""
        if value is not None and not isinstance(value, cls):
            raise TypeError(f"expected {cls.__name__}, got {type(value).__name__}")
        if job is None:
            if value is None:
                raise ValueError("the default settings cannot be removed")
            self._defaults[cls] = value
        elif value is None:
            own = self._own.get(cls, {})
            own.pop(job, None)
            if not own:
                self._own.pop(cls, None)
        else:
            self._own.setdefault(cls, {})[job] = value

    def overrides(self, cls: type) -> dict[str, Any]:
        """The jobs with their own settings of ``cls`` (a copy)."""
        return dict(self._own.get(cls, {}))
