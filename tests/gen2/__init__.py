"""gen2: an independent second generator of wire-format recordings (docs/events.md), for tests.

Written from the wire format alone, not from stepwatch/sim/simulator.py or stepwatch/sim/scenarios.py
(which it never imports), so that the detectors are tried on data their own simulator did not
shape. A :class:`~gen2.plan.Plan` describes a job and what goes wrong in it; :mod:`gen2.sync`
plays a synchronous data-parallel job on a true clock, :mod:`gen2.pipeline` a pipeline-parallel
one (stages, p2p), both emitting what each rank's monitor would send, on its host's clock;
:mod:`gen2.transport` batches those events as a rank monitor does, loses and reorders some and
writes the JSON Lines recording ``stepwatch replay`` reads (stepwatch/recording.py), with
``_arrival`` as ``stepwatch record`` writes it, or sorted by event time without it (an imported
trace). :mod:`gen2.scenarios` names the cases and what stepwatch should say about each.
"""
