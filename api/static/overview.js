// Overview: every cluster's state and capacity, the federation's totals, recent events.
"use strict";
(async () => {
  if (!(await AP.start())) return;
  const { h, api, apiAll, bar, badge, render, empty } = AP;
  const STARTING = ["Decided", "Applying", "Starting"];
  let events = [], cursor = null;

  async function newEvents() {
    // First read: the last 15 minutes; then only what came after the last event seen.
    const since = cursor ? null : new Date(Date.now() - 15 * 60 * 1000).toISOString();
    for (let pages = 0; pages < 20; pages++) {
      const page = await api("/events", { since, cursor, limit: 500 });
      events = events.concat(page.items).slice(-12);
      if (page.next_cursor) cursor = page.next_cursor;
      if (page.items.length < 500) break;
    }
    return events;
  }

  async function clustersOrNull() {
    try { return await api("/clusters"); } catch (exc) { if (exc.status === 403) return null; throw exc; }
  }

  async function load() {
    const [clusters, queues, placements, recent] = await Promise.all([
      clustersOrNull(), api("/queues"), apiAll("/placements", { state: [...STARTING, "Running", "Deleting"] }),
      newEvents()]);
    return { clusters, queues, placements, events: recent };
  }

  function perCluster(placements) {
    const counts = {};
    for (const p of placements) {
      const c = counts[p.cluster] || (counts[p.cluster] = empty_counts());
      (p.state === "Running" ? c.running : p.state === "Deleting" ? c.deleting : c.starting).add(p.job_id);
    }
    return counts;
  }

  function capacityBars(capacity) {
    return AP.RESOURCES.filter(([resource]) => capacity[resource]).map(([resource, label]) => {
      const amounts = capacity[resource];
      return bar(label, resource, amounts.used_milli / 1000, amounts.allocatable_milli / 1000, amounts.free_milli / 1000);
    });
  }

  const empty_counts = () => ({ starting: new Set(), running: new Set(), deleting: new Set() });
  // A cluster the broker cannot reach: what it had is not known now, and none of it is free to place on.
  const unreachable = (cluster) => cluster.state === "NotReady";

  function totalsOf(clusters) {
    const sum = {};
    for (const cluster of clusters) {
      for (const [resource, amounts] of Object.entries(cluster.capacity || {})) {
        const into = sum[resource] || (sum[resource] = { used_milli: 0, allocatable_milli: 0, free_milli: 0 });
        into.used_milli += amounts.used_milli;
        into.allocatable_milli += amounts.allocatable_milli;
        into.free_milli += amounts.free_milli;
      }
    }
    return sum;
  }

  // What NotReady clusters held, apart from the federation's free capacity.
  function unavailable(clusters) {
    if (!clusters.length) return null;
    const totals = totalsOf(clusters);
    const amounts = AP.RESOURCES.filter(([r]) => totals[r]).map(([r, label]) =>
      `${AP.formatAmount(totals[r].allocatable_milli / 1000, r)} ${label}`);
    return h("p", { class: "muted", "data-testid": "unavailable-capacity" },
      `Not counted: ${amounts.join(", ")} on ${clusters.map((c) => c.name).join(", ")} (NotReady)`);
  }

  function stat(label, value, testid, hint) {
    return h("div", { class: "stat", "data-testid": testid, title: hint },
      h("span", { class: "stat-value" }, value), h("span", { class: "stat-label" }, label));
  }

  function show({ clusters, queues, placements, events }) {
    const pending = queues.reduce((n, q) => n + q.pending, 0);
    const active = queues.reduce((n, q) => n + q.running, 0);
    const stats = [stat("Queued jobs", pending, "total-queued"),
                   stat("Admitted or running", active, "total-running", "admitted, dispatching or running")];
    if (clusters) {
      const ready = clusters.filter((c) => c.state === "Ready").length;
      stats.unshift(stat("Clusters ready", `${ready} / ${clusters.length}`, "total-clusters"),
                    stat("Nodes", clusters.reduce((n, c) => n + c.nodes, 0), "total-nodes"));
    }
    render(document.getElementById("totals"),
      h("div", { class: "stats" }, stats),
      clusters ? h("div", { class: "card totals-bars", "data-testid": "total-capacity" },
        h("h3", {}, "Federation capacity"), capacityBars(totalsOf(clusters.filter((c) => !unreachable(c)))),
        unavailable(clusters.filter(unreachable))) : null);

    const cards = document.getElementById("cluster-cards");
    if (!clusters) { render(cards, empty("Cluster capacity is shown to admins.")); }
    else if (!clusters.length) { render(cards, empty("No cluster is registered yet: POST /api/v1/clusters.")); }
    else {
      const counts = perCluster(placements);
      render(cards, clusters.map((c) => {
        const count = counts[c.name] || empty_counts();
        const labels = Object.entries(c.labels || {}).filter(([k]) => k !== "region");
        return h("article", { class: "card cluster-card", "data-testid": "cluster-card", "data-cluster": c.name },
          h("header", {},
            h("h3", {}, h("a", { href: "/clusters/" + encodeURIComponent(c.name), "data-key": "c-" + c.name }, c.name)),
            badge(c.state)),
          h("p", { class: "meta" }, h("span", { "data-testid": "region" }, "region " + ((c.labels || {}).region || "—")),
            " · ", `${c.nodes} nodes`),
          labels.length ? h("ul", { class: "chips", "aria-label": "labels" },
            labels.map(([k, v]) => h("li", {}, `${k}=${v}`))) : null,
          unreachable(c) ? h("p", { class: "error small", "data-testid": "capacity-unknown" },
            `capacity unknown since ${c.last_heartbeat ? AP.age(c.last_heartbeat) + " ago" : "it was registered"}: ` +
            "none of it counts as free") : capacityBars(c.capacity || {}),
          h("p", { class: "counts" },
            h("span", { "data-testid": "cluster-starting" }, `${count.starting.size} starting`), " · ",
            h("span", { "data-testid": "cluster-running" }, `${count.running.size} running`), " · ",
            h("span", { "data-testid": "cluster-deleting" }, `${count.deleting.size} being deleted`),
            unreachable(c) && count.starting.size + count.running.size ? h("span", { class: "error",
              "data-testid": "cluster-failing-over" }, ` · ${count.starting.size + count.running.size} failing over`)
              : null),
          c.last_error ? h("p", { class: "error small" }, c.last_error) : null);
      }));
    }

    render(document.getElementById("events"), events.length ? AP.table({
      testid: "events-table", caption: "Recent events", rows: [...events].reverse(), columns: [
        { key: "time", label: "Time", cell: (e) => AP.clock(e.time) },
        { key: "type", label: "Type", cell: (e) => h("span", { class: "evtype-" + e.type.toLowerCase() }, e.type) },
        { key: "object", label: "Object", cell: (e) => e.kind === "job" ?
            h("a", { href: "/jobs/" + e.object_id }, "job " + e.object_id) :
            e.kind === "cluster" ? h("a", { href: "/clusters/" + encodeURIComponent(e.object_id) }, "cluster " + e.object_id) :
            `${e.kind} ${e.object_id}` },
        { key: "reason", label: "Reason" },
        { key: "message", label: "Message" }] }) : empty("Nothing happened in the last 15 minutes."));
  }

  AP.live(load, show);
})();
