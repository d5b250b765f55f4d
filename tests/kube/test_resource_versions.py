"""resourceVersions from the event log when transactions commit out of id order (PostgreSQL's sequences):
a list's resourceVersion stops below an id still being committed, and a watch picks up a late event."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import insert

from api.kube.objects import COMMIT_SLACK, watermark
from api.kube.watch import EventCursor
from broker.store.db.models import Event, utcnow
from broker.store.tenancy import Principal

ADMIN = Principal("admin")


def _events(db, *rows: tuple[int, int, timedelta]) -> None:
    """(event id, job id, age) rows, committed now whatever their ids."""
    with db.sessions() as session, session.begin():
        session.execute(insert(Event.__table__), [
            {"id": event_id, "time": utcnow() - age, "kind": "job", "object_id": str(job), "type": "Normal",
             "reason": "Admitted", "message": "-"} for event_id, job, age in rows])


def test_a_list_stops_below_an_event_still_being_committed_and_a_watch_from_it_sees_it(db):
    old = COMMIT_SLACK * 2
    _events(db, (1, 10, old), (2, 10, old), (4, 11, timedelta()), (5, 12, timedelta()))  # 3: not committed yet
    with db.sessions() as session:
        assert watermark(session) == 2  # a watch from 2 reads 3 once it commits, and 4 and 5
        cursor = EventCursor(watermark(session))
        assert cursor.changed_jobs(session, ADMIN) == ([11, 12], set())
        assert cursor.changed_jobs(session, ADMIN) == ([], set())
    _events(db, (3, 13, timedelta()))  # the late commit
    with db.sessions() as session:
        assert cursor.changed_jobs(session, ADMIN) == ([13], set())  # below the newest id seen, still sent
        assert watermark(session) == 5


def test_an_old_gap_is_a_rollback_and_does_not_hold_lists_back(db):
    old = COMMIT_SLACK * 2
    _events(db, (1, 10, old), (3, 10, old), (4, 11, timedelta()))
    with db.sessions() as session:
        assert watermark(session) == 4


def test_a_watch_sees_only_the_jobs_of_its_tenant(db):
    _events(db, (1, 10, timedelta()))
    with db.sessions() as session:
        assert EventCursor(0).changed_jobs(session, Principal("tenant", tenant_id=7, tenant_name="t")) == ([], set())


def _statements(db) -> list[str]:
    """Every SQL statement the database runs from now on (a list that fills)."""
    from sqlalchemy import event

    seen: list[str] = []
    event.listen(db.engine, "before_cursor_execute", lambda conn, cursor, statement, *rest: seen.append(statement))
    return seen


def test_a_watch_reads_what_follows_its_cursor_and_the_gaps_it_saw_never_again_what_it_handled(db):
    """Each poll asks for the ids after the newest it has, and for the ids it saw skipped (3, 6-7) until they come or
    COMMIT_SLACK passes: not every event of the last COMMIT_SLACK, twice a second, as before."""
    _events(db, (1, 10, timedelta()), (2, 10, timedelta()), (4, 11, timedelta()), (5, 12, timedelta()),
            (8, 13, timedelta()))
    cursor = EventCursor(1)
    with db.sessions() as session:
        assert cursor.changed_jobs(session, ADMIN) == ([10, 11, 12, 13], set())
    assert [(first, last) for first, last, _ in cursor.gaps] == [(3, 3), (6, 7)]
    _events(db, (6, 14, timedelta()))
    seen = _statements(db)
    with db.sessions() as session:
        assert cursor.changed_jobs(session, ADMIN) == ([14], set())
    assert [(first, last) for first, last, _ in cursor.gaps] == [(3, 3), (7, 7)]
    assert len([s for s in seen if "FROM events" in s]) == 2  # after the newest, and in the gaps
    cursor.gaps = [(first, last, since - COMMIT_SLACK * 2) for first, last, since in cursor.gaps]  # long ago
    seen.clear()
    with db.sessions() as session:
        assert cursor.changed_jobs(session, ADMIN) == ([], set())
    assert cursor.gaps == [] and len([s for s in seen if "FROM events" in s]) == 1
