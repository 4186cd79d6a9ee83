"""Per-step rules: peer groups assembled from rank steps, the straggler rules (short and long horizon),
imbalance, collective arrival, per-host clock offsets and what a slow rank costs."""
