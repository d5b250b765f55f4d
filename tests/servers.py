"""Run an ASGI app on a real socket in a background thread, for tests that need real HTTP."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Iterator

import uvicorn


@contextlib.contextmanager
def serving(app, *, startup_timeout: float = 30.0) -> Iterator[str]:
    """Yield the base URL once the server has started (uvicorn's own `started` flag), stop it after."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    ready = threading.Event()
    while not ready.wait(0.02):
        if server.started:
            ready.set()
        elif not thread.is_alive():
            raise RuntimeError("the test server failed to start")
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(startup_timeout)
        sock.close()
