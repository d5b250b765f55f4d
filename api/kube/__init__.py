"""A Kubernetes-API-compatible front door: kubectl, GitOps tools and client libraries submit and watch JobSets
at `/k8s` (a kubeconfig's `server: https://broker/k8s`)."""
