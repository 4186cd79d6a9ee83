"""Job-wide rules: throughput regression, communication slowdown, checkpoint staleness, and the
effective-compute SLIs."""
