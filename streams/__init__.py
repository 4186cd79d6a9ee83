"""Faust app and agents: thin adapters around the detection core."""
