"""stepwatch: real-time straggler and hang detection for GPU training jobs."""

__version__ = "0.1.0"

# In a source checkout models/, streams/ and producers/ sit next to this folder (pyproject.toml
# maps them to stepwatch.models ...). Look there too, so that a checkout on PYTHONPATH (or the
# current directory of ``python -m stepwatch.cli``) imports its own subpackages, not those of
# another checkout installed in editable mode. An installed package finds its own first.
__path__.append(__import__("os").path.dirname(__path__[0]))  # type: ignore[name-defined]  # noqa: F821
