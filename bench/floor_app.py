"""The floor bench/api.py measures the broker against: the least a FastAPI app can do per submission.

One POST, one row: the body parsed as JSON and inserted into a table of the same database through the same
SQLAlchemy engine settings, in the thread pool like the broker's routes, with a commit. No token, no
validation, no events. `uvicorn --factory bench.floor_app:create_app` with ARCHIPELAGO_DATABASE_URL set.
"""

from __future__ import annotations

import os
import threading
from contextlib import nullcontext
from typing import Annotated, Any

from fastapi import Body, FastAPI
from sqlalchemy import JSON, Column, Integer, MetaData, Table, insert

from broker.store.db.session import make_engine

floor = Table("bench_floor", MetaData(), Column("id", Integer, primary_key=True), Column("body", JSON))


def create_app() -> FastAPI:
    url = os.environ["ARCHIPELAGO_DATABASE_URL"]
    engine = make_engine(url)
    floor.create(engine, checkfirst=True)
    writer = threading.Lock() if url.startswith("sqlite") else nullcontext()  # as the broker queues SQLite writes
    app = FastAPI()

    @app.get("/readyz")
    def ready() -> dict:
        return {"status": "ok"}

    @app.post("/api/v1/jobs", status_code=201)
    def submit(body: Annotated[Any, Body()]) -> dict:
        with writer, engine.begin() as connection:
            row_id = connection.execute(insert(floor).values(body=body).returning(floor.c.id)).scalar_one()
        return {"id": row_id}

    return app
