"""Where alerts leave the engine: failure classes and actions, scope and job attribution, restarts,
the node ledger and incidents."""
