// Clusters: one row per member, with its state, labels, health and GPU use.
"use strict";
(async () => {
  if (!(await AP.start())) return;
  const { h, api, bar, badge, render, empty } = AP;
  const sort = { key: "name", dir: "asc" };
  let last = [];

  const gpu = (c) => c.capacity && c.capacity["nvidia.com/gpu"];
  function show(clusters) {
    last = clusters;
    const container = document.getElementById("clusters");
    if (!clusters.length) return render(container, empty("No cluster is registered yet: POST /api/v1/clusters."));
    render(container, AP.table({
      testid: "clusters-table", caption: "Member clusters", rows: clusters, rowKey: (c) => c.name, sortable: true,
      state: sort, onSort: (key) => { sort.dir = sort.key === key && sort.dir === "asc" ? "desc" : "asc"; sort.key = key; show(last); },
      columns: [
        { key: "name", label: "Cluster", header: true,
          cell: (c) => h("a", { href: "/clusters/" + encodeURIComponent(c.name), "data-key": "c-" + c.name }, c.name) },
        { key: "state", label: "State", cell: (c) => badge(c.state) },
        { key: "region", label: "Region", sort: (c) => (c.labels || {}).region || "", cell: (c) => (c.labels || {}).region || "—" },
        { key: "labels", label: "Labels", sort: false, cell: (c) => h("ul", { class: "chips" },
            Object.entries(c.labels || {}).map(([k, v]) => h("li", {}, `${k}=${v}`))) },
        { key: "nodes", label: "Nodes", numeric: true },
        { key: "gpu", label: "GPU", sort: (c) => gpu(c) ? gpu(c).used_milli / Math.max(1, gpu(c).allocatable_milli) : -1,
          cell: (c) => gpu(c) ? bar("GPU", "nvidia.com/gpu", gpu(c).used_milli / 1000, gpu(c).allocatable_milli / 1000, gpu(c).free_milli / 1000) : "—" },
        { key: "topology", label: "Topology", sort: (c) => AP.topologySource(c),
          cell: (c) => h("span", { "data-testid": "topology-source" }, AP.topologySource(c)) },
        { key: "kubernetes_version", label: "Kubernetes", cell: (c) => c.kubernetes_version || "—" },
        { key: "last_heartbeat", label: "Heartbeat", cell: (c) => c.last_heartbeat ? AP.age(c.last_heartbeat) + " ago" : "—" },
        { key: "last_error", label: "Last error", cell: (c) => c.last_error ? h("span", { class: "error small" }, c.last_error) : "—" },
      ] }));
  }

  AP.live(() => api("/clusters"), show);

  // The override rules, for admins (only they may read them).
  const CHANGES = ["image", "env", "nodeSelector", "nodeAffinity", "tolerations", "labels", "annotations", "podLabels",
                   "podAnnotations", "jsonPatch"];
  function showOverrides(rules) {
    document.getElementById("overrides").hidden = false;
    render(document.getElementById("overrides-table"), rules.length ? AP.table({
      testid: "overrides-table", caption: "Override rules, in the order they apply", rows: rules, rowKey: (r) => r.name,
      columns: [
        { key: "order", label: "Order", numeric: true },
        { key: "name", label: "Rule", header: true },
        { key: "target", label: "Target", cell: (r) => "cluster" in r ? "cluster " + r.cluster : "selector " + (r.selector || "(every cluster)") },
        { key: "changes", label: "Changes", cell: (r) => h("ul", { class: "chips" },
            CHANGES.filter((c) => c in r).map((c) => h("li", {}, c === "jsonPatch" ? `jsonPatch (${r.jsonPatch.length})` : c))) },
        { key: "description", label: "Description", cell: (r) => r.description || "—" },
      ] }) : empty("No override rule: every cluster receives JobSets as submitted."));
  }
  if (AP.me && AP.me.role === "admin") AP.live(() => api("/overrides"), showOverrides);
})();
