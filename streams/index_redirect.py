"""``/`` leads to the dashboard: a browser pointed at the worker's URL (the ready line's) lands on the jobs list,
not on Faust's ``{"status": "OK"}`` index. Faust mounts that index at ``/`` first and has no setting to drop it,
so this is a middleware that answers ``/`` before routing."""

from __future__ import annotations


def index_redirect():
    """An aiohttp middleware: ``GET /`` -> 302 ``/dashboard``; every other request goes on unchanged."""
    from aiohttp import web

    @web.middleware
    async def to_dashboard(request, handler):
        if request.path == "/" and request.method in ("GET", "HEAD"):
            raise web.HTTPFound("/dashboard")
        return await handler(request)

    return to_dashboard
