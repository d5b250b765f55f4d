"""The broker's own names on a member, apart from the modules that call members (so the CLI and the store read them
without loading the Kubernetes client): its system namespace, where `join` keeps its identity, and the prefix of
what `join` makes there."""

SYSTEM_NAMESPACE = "archipelago-system"
NAME_PREFIX = "archipelago-"
