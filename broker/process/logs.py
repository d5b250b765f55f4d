"""How the broker's processes log: ARCHIPELAGO_LOG_LEVEL, as text lines or one JSON object a line
(ARCHIPELAGO_LOG_FORMAT=json, for a log pipeline), on stderr; uvicorn's own loggers go the same way."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from broker.process.settings import Settings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(settings: Settings) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if settings.log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):  # through the root's handler, once
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
