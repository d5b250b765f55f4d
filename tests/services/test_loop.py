"""The loop runner: a wake-up during a pass is never lost; a failing pass never stops the loop."""

from __future__ import annotations

import threading

from broker.services.loop import LoopService, ServiceRunner


class Recorder(LoopService):
    name = "recorder"

    def __init__(self) -> None:
        super().__init__(interval=3600)  # only wake-ups run it here
        self.passes = 0
        self.first_pass_started = threading.Event()
        self.release_first_pass = threading.Event()
        self.second_pass_done = threading.Event()

    def run_once(self) -> None:
        self.passes += 1
        if self.passes == 1:
            self.first_pass_started.set()
            assert self.release_first_pass.wait(30)
        else:
            self.second_pass_done.set()


def test_a_wake_up_during_a_pass_runs_one_more_pass():
    service = Recorder()
    runner = ServiceRunner([service])
    runner.start()  # the first pass starts at once
    try:
        assert service.first_pass_started.wait(30)
        runner.wake("recorder")  # arrives while the first pass holds the loop
        service.release_first_pass.set()
        assert service.second_pass_done.wait(30), "the wake-up was lost"
    finally:
        runner.stop()
    assert service.passes >= 2


class Failing(LoopService):
    name = "failing"

    def __init__(self) -> None:
        super().__init__(interval=3600)
        self.calls = 0

    def run_once(self) -> None:
        self.calls += 1
        raise RuntimeError("member exploded")


def test_a_failed_pass_is_logged_and_the_next_one_still_runs(caplog):
    service = Failing()
    service.run_guarded()
    service.run_guarded()
    assert service.calls == 2
    assert "failing: pass failed" in caplog.text
