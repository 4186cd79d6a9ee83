"""stepwatch: real-time straggler and hang detection for GPU training jobs."""

__version__ = "0.1.0"
