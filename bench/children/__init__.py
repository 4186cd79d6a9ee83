"""Programs the throughput benchmark (bench/throughput.py) starts in processes of their own, each run as
``python -m bench.children.<name> ARGS`` from the repository root (so that it imports this checkout)."""
