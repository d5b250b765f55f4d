"""The store: the SQL inventory (`db`: models, sessions, fencing, migrations) and the functions that take a session —
jobs, tenancy, the inventory of members, cluster overrides, the outbox (`outbox`), the scheduler's read and commit
(`scheduling`), history and retention.

A function here takes a session and leaves committing to its caller; it may call a member only where registration
must (`inventory`). Nothing here imports the loop services, the API or the CLI (tests/test_layout.py).
"""
