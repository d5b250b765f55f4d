"""Kubernetes' own rules for its objects, pure: resource quantities, labels and selectors, taints and tolerations,
what a pod requests, merge patches, and YAML and JSON documents read with bounds.

The engine, the member client and the simulator read them alike; they import nothing else of the project.
"""
