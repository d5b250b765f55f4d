"""A replica that may have lost its lease sends nothing more to the members: the fence is asked right before each
request goes out, not once before a series of them (an apply waiting for the request budget, a sweep's deletes)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from broker.services.members import MemberClients
from broker.store.db.fencing import Fence, Fenced, fenced
from broker.store.db.models import Cluster
from clusters.member import NODES


def test_a_revoked_fence_stops_the_next_request_before_it_leaves(federation, settings):
    fence = Fence({"leader": 1})
    database = fenced(federation.db, fence)
    members = MemberClients(settings, guard=database.ensure_leading)
    with federation.db.sessions() as session:
        row = session.execute(select(Cluster.id, Cluster.kubeconfig_encrypted, Cluster.context)
                              .where(Cluster.name == "eu-west")).one()
    client = members.get(row.id, row.kubeconfig_encrypted, row.context)
    nodes, _ = client.list(NODES)
    assert nodes  # while the lease is held, requests go out
    sent = len(federation.sim.requests("eu-west"))
    fence.revoke()
    with pytest.raises(Fenced):
        client.list(NODES)
    assert len(federation.sim.requests("eu-west")) == sent  # nothing reached the member
    members.retain(set())
