"""Hang detection that names the culprit, and the stack requests it sends to a hung job."""
