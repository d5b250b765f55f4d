"""Run an ASGI app on a real socket in a background thread, for tests that need real HTTP."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Iterator

import uvicorn


@contextlib.contextmanager
def serving(app, *, startup_timeout: float = 30.0, **options) -> Iterator[str]:
    """Yield the base URL once the server has started (uvicorn's own `started` flag), stop it after.
    `options` go to uvicorn's Config (`ssl_certfile` and `ssl_keyfile` serve HTTPS)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    ready = threading.Event()
    while not ready.wait(0.02):
        if server.started:
            ready.set()
        elif not thread.is_alive():
            raise RuntimeError("the test server failed to start")
    try:
        yield f"{'https' if options.get('ssl_certfile') else 'http'}://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(startup_timeout)
        sock.close()


def run_async(main):
    """`asyncio.run(main())` in a thread of its own, its result or its exception: the main thread may be inside an
    event loop already (Playwright's sync API leaves one running there)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, main()).result()
