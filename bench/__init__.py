"""Benchmarks (see bench/README.md). A package so that the throughput benchmark's parts and the child
programs it starts (bench/children/) import one another as ``bench.*``."""
