"""Background loops of the worker that must outlive their own failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable


async def run_forever(run: Callable[[], Awaitable[None]], *, what: str, log: logging.Logger) -> None:
    """Await ``run()``; after any failure log it and start it again a second later. For the sinks (Alertmanager,
    action hooks): never let one die, detection does not depend on them."""
    while True:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; restarting it", what)
            await asyncio.sleep(1.0)


async def cancel(task: asyncio.Future | None) -> None:
    """Cancel a background task and wait until it has stopped, whatever it ended with."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass  # silent: the cancellation asked for
    except Exception:  # it failed before it saw the cancellation: said, then stopped all the same
        logging.getLogger("stepwatch.worker").warning("a background task ended with an error", exc_info=True)
