"""The wire format: event records, their decoders (row and column), size limits, dead letters."""
