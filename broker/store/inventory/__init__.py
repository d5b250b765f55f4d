"""Member clusters in the inventory: registration, what a sync writes, health, cordon and drain,
and the capacity views. Functions take a session and leave committing to the caller.

A member's Kubernetes objects become rows here: `member_inventory` turns nodes, pods and
HyperNodes into node rows (allocatable, used) and a resolved HyperNode tree; `write_inventory`
writes only what differs from the rows already stored.

`registration` checks and stores a member; `sync` turns its objects into rows; `recipes` says how a tree is found
from node labels; `admin` cordons, drains, edits
and removes it; `views` shows capacity. The rest of the broker imports them from here.
"""

from broker.store.inventory.admin import cordon_cluster, drain_cluster, remove_cluster, uncordon_cluster, update_cluster
from broker.store.inventory.devices import delete_mapping, list_mappings, set_mapping
from broker.store.inventory.recipes import (Discovery, check_choice, create_recipe, delete_recipe, discovery_of,
                                            list_recipes)
from broker.store.inventory.registration import (FOR_CLUSTER_WRITE, RegistrationError, agent_cluster,
                                                 check_registration, cluster_to_change, connect, get_cluster,
                                                 kubeconfig_policy, register_cluster, register_pull_cluster,
                                                 store_registration)
from broker.store.inventory.sync import (PodHold, WriteResult, member_inventory, node_row, pod_usage, record_probe,
                                         record_sync_error, resolve_topology, write_inventory)
from broker.store.inventory.views import cluster_capacity, cluster_view, devices_view, list_views, topology_view

__all__ = ["FOR_CLUSTER_WRITE", "delete_mapping", "list_mappings", "set_mapping", "Discovery", "PodHold", "check_choice", "create_recipe", "delete_recipe",
           "discovery_of", "list_recipes", "RegistrationError", "WriteResult", "agent_cluster", "check_registration",
           "cluster_capacity", "cluster_to_change", "cluster_view", "connect", "devices_view", "cordon_cluster", "drain_cluster",
           "get_cluster", "kubeconfig_policy", "list_views", "member_inventory", "node_row", "pod_usage",
           "record_probe", "record_sync_error", "register_cluster", "register_pull_cluster", "remove_cluster",
           "resolve_topology", "store_registration", "topology_view", "uncordon_cluster", "update_cluster",
           "write_inventory"]
