// One cluster: its HyperNode tree coloured by load, its nodes, and the jobs placed on it (and on which HyperNode).
"use strict";
(async () => {
  if (!(await AP.start())) return;
  const { h, api, apiAll, bar, badge, render, empty } = AP;
  const name = document.getElementById("cluster-name").dataset.name;
  const LIVE = ["Decided", "Applying", "Starting", "Running", "Deleting"];
  const BOX_W = 168, BOX_H = 58, GAP_X = 18, GAP_Y = 44, NODE = 12, NODE_GAP = 4, NODES_PER_ROW = 10;

  async function load() {
    const [cluster, topology, placements, jobs] = await Promise.all([
      api("/clusters/" + encodeURIComponent(name)), api("/topology/" + encodeURIComponent(name)),
      apiAll("/placements", { cluster: name, state: LIVE }), apiAll("/jobs", { cluster: name })]);
    const names = Object.fromEntries(jobs.map((j) => [j.id, `${j.name} (${j.tenant})`]));
    return { cluster, topology, placements: placements.map((p) => ({ ...p, job: names[p.job_id] || "job " + p.job_id })) };
  }

  // The resource that colours the tree: GPUs where the cluster has them, else CPU.
  const keyResource = (topology) => topology.nodes.some((n) => n.allocatable_milli["nvidia.com/gpu"]) ? "nvidia.com/gpu" : "cpu";
  const ratio = (entry, resource) => entry.allocatable_milli[resource] ? (entry.used_milli[resource] || 0) / entry.allocatable_milli[resource] : 0;
  const amount = (entry, resource, field) => AP.formatAmount((entry[field][resource] || 0) / 1000, resource);

  function layout(hypernodes, nodes) {
    const byName = Object.fromEntries(hypernodes.map((hn) => [hn.name, { ...hn, children: [], members: [] }]));
    const roots = [];
    for (const hn of Object.values(byName)) (byName[hn.parent] ? byName[hn.parent].children : roots).push(hn);
    for (const node of nodes) if (byName[node.hypernode]) byName[node.hypernode].members.push(node);
    const depthOf = (hn) => 1 + Math.max(0, ...hn.children.map(depthOf));
    const depth = Math.max(0, ...roots.map(depthOf));
    let slot = 0;
    function place(hn, level) {
      hn.level = level;
      hn.children.sort((a, b) => a.name.localeCompare(b.name));
      if (!hn.children.length) { hn.x = slot++ * (BOX_W + GAP_X); return; }
      hn.children.forEach((child) => place(child, level + 1));
      hn.x = (hn.children[0].x + hn.children[hn.children.length - 1].x) / 2;
    }
    roots.sort((a, b) => a.name.localeCompare(b.name)).forEach((root) => place(root, 0));
    return { all: Object.values(byName), depth, width: Math.max(1, slot) * (BOX_W + GAP_X) - GAP_X };
  }

  function tree(topology, jobsOn) {
    const resource = keyResource(topology);
    const label = resource === "cpu" ? "CPU" : "GPU";
    document.getElementById("tree-legend").replaceChildren(
      `Colour: ${label} in use — `, ...["load-none", "load-low", "load-mid", "load-high"].map((cls, i) =>
        h("span", { class: "legend-item" }, h("span", { class: "swatch " + cls, "aria-hidden": "true" }),
          ["idle", "under 60%", "60–90%", "90% or more"][i], " ")));
    if (!topology.hypernodes.length) return empty("This cluster reports no HyperNodes and no topology labels.");
    const { all, depth, width } = layout(topology.hypernodes, topology.nodes);
    const maxMembers = Math.max(0, ...all.filter((hn) => !hn.children.length).map((hn) => hn.members.length));
    const nodeRows = Math.ceil(maxMembers / NODES_PER_ROW);
    const height = depth * (BOX_H + GAP_Y) - GAP_Y + (nodeRows ? 10 + nodeRows * (NODE + NODE_GAP) : 0) + 4;
    const svg = h("svg", { viewBox: `-2 -2 ${width + 4} ${height + 4}`, width: width + 4, height: height + 4,
                           role: "group", "aria-label": `HyperNode tree of ${name}`, class: "tree" });
    const y = (hn) => hn.level * (BOX_H + GAP_Y);
    for (const hn of all) for (const child of hn.children) {
      svg.append(h("path", { class: "edge", d: `M${hn.x + BOX_W / 2},${y(hn) + BOX_H} V${y(hn) + BOX_H + GAP_Y / 2} ` +
        `H${child.x + BOX_W / 2} V${y(child)}` }));
    }
    for (const hn of all) {
      const share = ratio(hn, resource);
      const jobs = jobsOn[hn.name] || 0;
      const words = `HyperNode ${hn.name}, tier ${hn.tier}, ${hn.nodes} nodes, ${label} ${amount(hn, resource, "used_milli")} ` +
                    `used of ${amount(hn, resource, "allocatable_milli")}, ${amount(hn, resource, "free_milli")} free` +
                    (jobs ? `, ${jobs} job${jobs > 1 ? "s" : ""} placed on it` : "");
      const g = h("g", { class: "hn " + AP.loadClass(share), transform: `translate(${hn.x},${y(hn)})`, tabindex: 0,
                         role: "img", "aria-label": words, "data-hypernode": hn.name, "data-key": "hn-" + hn.name,
                         "data-testid": "hypernode" },
        h("title", {}, words),
        h("rect", { class: "hn-box", width: BOX_W, height: BOX_H, rx: 6 }),
        h("text", { x: 8, y: 17, class: "hn-name" }, hn.name.length > 22 ? hn.name.slice(0, 21) + "…" : hn.name),
        h("text", { x: BOX_W - 8, y: 17, class: "hn-tier", "text-anchor": "end" }, "T" + hn.tier),
        h("text", { x: 8, y: 34, class: "hn-use", "data-testid": "hn-use" },
          `${label} ${amount(hn, resource, "used_milli")}/${amount(hn, resource, "allocatable_milli")}`),
        jobs ? h("text", { x: BOX_W - 8, y: 34, class: "hn-jobs", "text-anchor": "end" }, `${jobs} job${jobs > 1 ? "s" : ""}`) : null,
        h("rect", { class: "hn-track", x: 8, y: 43, width: BOX_W - 16, height: 6, rx: 3 }),
        h("rect", { class: "hn-fill", x: 8, y: 43, width: Math.max(0, (BOX_W - 16) * Math.min(1, share)), height: 6, rx: 3 }));
      svg.append(g);
      hn.members.sort((a, b) => a.name.localeCompare(b.name)).forEach((node, i) => {
        const nx = hn.x + 4 + (i % NODES_PER_ROW) * (NODE + NODE_GAP);
        const ny = y(hn) + BOX_H + 10 + Math.floor(i / NODES_PER_ROW) * (NODE + NODE_GAP);
        svg.append(h("rect", { class: "node-dot " + (node.ready ? AP.loadClass(ratio(node, resource)) : "node-down"),
                               x: nx, y: ny, width: NODE, height: NODE, rx: 2 },
          h("title", {}, `node ${node.name}: ${label} ${amount(node, resource, "used_milli")} used of ` +
                         `${amount(node, resource, "allocatable_milli")}${node.ready ? "" : " (not ready)"}`)));
      });
    }
    return svg;
  }

  // An admin cordons (no new placements), uncordons, or drains (its unstarted work placed elsewhere) the cluster.
  function actions(cluster) {
    if (!AP.me || AP.me.role !== "admin") return null;
    const post = (verb) => () => AP.send("POST", `/clusters/${encodeURIComponent(cluster.name)}/${verb}`);
    const cordoned = ["Cordoned", "Draining"].includes(cluster.state);
    return [
      cordoned ? AP.action("Uncordon", `Uncordon ${cluster.name}? New work may be placed on it again.`, post("uncordon"),
                           "uncordon")
               : AP.action("Cordon", `Cordon ${cluster.name}? No new work is placed on it; what runs there stays.`,
                           post("cordon"), "cordon"),
      cluster.state !== "Draining" ? AP.action("Drain", `Drain ${cluster.name}? Its work that has not started is ` +
                                               "placed elsewhere, and nothing new goes there.", post("drain"), "drain")
                                   : null];
  }

  function show({ cluster, topology, placements }) {
    const labels = Object.entries(cluster.labels || {});
    render(document.getElementById("cluster-summary"),
      h("div", { class: "summary card" },
        h("dl", { class: "facts" },
          h("dt", {}, "State"), h("dd", { "data-testid": "cluster-state" }, badge(cluster.state), actions(cluster)),
          h("dt", {}, "Region"), h("dd", { "data-testid": "region" }, (cluster.labels || {}).region || "—"),
          h("dt", {}, "Labels"), h("dd", {}, labels.length ? h("ul", { class: "chips" }, labels.map(([k, v]) => h("li", {}, `${k}=${v}`))) : "—"),
          h("dt", {}, "Nodes"), h("dd", { "data-testid": "node-count" }, cluster.nodes),
          h("dt", {}, "Topology"), h("dd", { "data-testid": "topology-source" }, AP.topologySource(cluster)),
          Object.keys(cluster.devices || {}).length ? [h("dt", {}, "Devices (DRA)"), h("dd", { "data-testid": "devices" },
            Object.entries(cluster.devices).map(([driver, c]) => `${driver}: ${c.devices}, ${c.allocated} held`).join("; "))]
            : null,
          (cluster.warnings || []).length ? [h("dt", {}, "Topology warnings"), h("dd", { class: "error" },
            h("ul", {}, cluster.warnings.map((w) => h("li", {}, w))))] : null,
          h("dt", {}, "Kubernetes"), h("dd", {}, cluster.kubernetes_version || "—"),
          h("dt", {}, "Heartbeat"), h("dd", {}, cluster.last_heartbeat ? AP.age(cluster.last_heartbeat) + " ago" : "—"),
          cluster.last_error ? [h("dt", {}, "Last error"), h("dd", { class: "error" }, cluster.last_error)] : null),
        h("div", { class: "bars" }, AP.RESOURCES.filter(([r]) => cluster.capacity[r]).map(([r, label]) =>
          bar(label, r, cluster.capacity[r].used_milli / 1000, cluster.capacity[r].allocatable_milli / 1000,
            cluster.capacity[r].free_milli / 1000)))));

    const jobsOn = {};
    for (const p of placements) if (p.hypernode) jobsOn[p.hypernode] = (jobsOn[p.hypernode] || 0) + 1;
    render(document.getElementById("hypernode-tree"), tree(topology, jobsOn));

    render(document.getElementById("cluster-jobs"), placements.length ? AP.table({
      testid: "cluster-jobs-table", caption: "Jobs placed on this cluster", rows: placements, rowKey: (p) => p.id,
      columns: [
        { key: "job", label: "Job", header: true, cell: (p) => h("a", { href: "/jobs/" + p.job_id, "data-key": "j-" + p.id }, p.job) },
        { key: "part", label: "Part", cell: (p) => p.part || "whole" },
        { key: "state", label: "State", cell: (p) => badge(p.state) },
        { key: "hypernode", label: "HyperNode", cell: (p) => h("span", { "data-testid": "hypernode-name" }, p.hypernode || "—") },
        { key: "tier", label: "Tier", numeric: true, cell: (p) => p.tier ?? "—" },
        { key: "nodes", label: "Nodes", cell: (p) => p.nodes.join(", ") || "—" },
        { key: "resources", label: "Resources", cell: (p) => Object.entries(p.resources).map(([r, v]) => `${r} ${v}`).join(", ") },
      ] }) : empty("No job is placed on this cluster."));

    render(document.getElementById("nodes"), topology.nodes.length ? AP.table({
      testid: "nodes-table", caption: "Nodes", rows: topology.nodes, rowKey: (n) => n.name, columns: [
        { key: "name", label: "Node", header: true },
        { key: "hypernode", label: "HyperNode", cell: (n) => n.hypernode || "—" },
        { key: "ready", label: "Ready", cell: (n) => cluster.state === "NotReady"  // last heard of, not now
            ? h("span", { class: "muted", "data-testid": "node-unknown" },
                `unknown since ${cluster.last_heartbeat ? AP.age(cluster.last_heartbeat) + " ago" : "registration"}`)
            : n.ready ? (n.unschedulable ? "cordoned" : "yes") : h("strong", { class: "error" }, "no") },
        ...AP.RESOURCES.map(([r, label]) => ({ key: r, label, cell: (n) => n.allocatable_milli[r] ?
          bar(label, r, (n.used_milli[r] || 0) / 1000, n.allocatable_milli[r] / 1000, (n.free_milli[r] || 0) / 1000) : "—" })),
      ] }) : empty("No nodes reported yet."));
  }

  AP.live(load, show);
})();
