"""The pure detection core: the one road from bytes to alerts (``pipeline``, ``engine``) and its rules.

Sub-packages (docs/architecture.md, "Where the code lives"): ``wire`` (the wire format), ``steps``
(assembly and the per-step rules), ``hang``, ``jobhealth`` (job-wide rules), ``telemetry`` (node
telemetry as causes), ``oncall`` (where alerts leave the engine). Imports nothing from ``stepwatch``.
"""
