"""The engine: pure rules, no I/O. JobSet parsing (`jobset`), placement (`placement`: snapshot, plugins, fairness,
the cycle), status rules (`status`) and cluster override rules (`overrides`).

It imports no database, web framework or Kubernetes client, and nothing of the broker outside this package but
Kubernetes' own object rules (`clusters.rules`): it takes values and returns decisions with reasons, so that it is
tested without a database or a member, and the loop services alone join it to I/O (tests/test_layout.py keeps it so).
"""
