"""Every router of the REST API; `api.app` includes them in this order."""

ROUTER_MODULES = [
    "clusters",
    "agent",
    "tenants",
    "jobs",
    "overrides",
    "dashboard",
]
