"""Every router of the REST API; `api.app` includes them in this order, which is the order FastAPI tries their
routes in: jobs first, as submissions and listings are the most frequent requests (each route tried before the one
that matches cost a POST about 1% of its time)."""

ROUTER_MODULES = [
    "jobs",
    "clusters",
    "agent",
    "tenants",
    "overrides",
    "dashboard",
    "sso",
]
