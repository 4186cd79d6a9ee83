"""Hang detection that names the culprit, and the stack requests it sends to a hung job.

One file per concept: ``detector.py`` (``HangDetector``, ``HangSettings``: the rule and its alert's life),
``progress.py`` (where the job and each rank are), ``diagnosis.py`` (who is to blame), ``stack_requests.py``
(stacks asked on demand) with ``stacks.py`` (their wire record), ``evidence.py`` (the alert's evidence, typed)
and ``text.py`` (its summary). docs/hang.md describes the rule.
"""
