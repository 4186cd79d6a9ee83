"""A third generator of labelled recordings, written from the user-facing docs alone (see job.py)."""
