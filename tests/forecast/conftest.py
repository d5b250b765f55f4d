"""The scheduler's fixtures (`setup`, `scheduler`): the forecast reads what it placed."""

from tests.scheduler.conftest import scheduler, setup  # noqa: F401
