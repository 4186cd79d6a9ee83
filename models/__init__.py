"""Event and alert records (the wire format) and the pure detection models."""
