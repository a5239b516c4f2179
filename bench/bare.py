"""The ceiling: a bare ASGI app that reads the body and answers 204, nothing else.

Served by the same uvicorn configuration as the edge (uvloop, httptools, no access log), so
the ingest ratio measures what the edge's routing, validation, signing check and durable
write cost on top of the server stack itself.
"""

from __future__ import annotations


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    more = True
    while more:  # drain the request body, as any real handler must
        message = await receive()
        more = message.get("more_body", False)
    if scope["path"] in ("/dea/health", "/health"):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _starlette_app():
    """The framework alone: one Starlette route that reads the JSON body and answers 204, a
    reference between the bare ceiling and the edge (what the framework itself costs)."""
    import orjson
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def beacon(request):
        orjson.loads(await request.body())
        return Response(status_code=204)

    async def health(request):
        return Response(b"ok")

    return Starlette(
        routes=[
            Route("/dea/url/impression", beacon, methods=["POST"]),
            Route("/dea/health", health, methods=["GET"]),
        ]
    )


starlette_app = _starlette_app()
