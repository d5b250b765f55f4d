"""When will it start: expected runtimes (`runtime`) and the fleet played forward (`play`). Pure, as the engine is."""

from broker.engine.forecast.play import Expected, Limits, forecast
from broker.engine.forecast.runtime import (EXPECTED_RUNTIME_ANNOTATION, Runtime, declared_runtime, deadline,
                                            expected_end, expected_runtime, learned, parse_duration, trusted)

__all__ = ["EXPECTED_RUNTIME_ANNOTATION", "Expected", "Limits", "Runtime", "declared_runtime", "deadline",
           "expected_end", "expected_runtime", "forecast", "learned", "parse_duration", "trusted"]
