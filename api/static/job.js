// One job: its state, placements (cluster, HyperNode, nodes), aggregated and per-member status, why it waits, timeline.
"use strict";
(async () => {
  if (!(await AP.start())) return;
  const { h, api, badge, render, empty } = AP;
  const id = document.getElementById("job-title").dataset.jobId;
  const FINISHED = ["Succeeded", "Failed", "Cancelled"];

  function keyValues(object, testid) {
    const entries = Object.entries(object || {});
    if (!entries.length) return empty("No status reported yet.");
    return h("dl", { class: "facts", "data-testid": testid }, entries.map(([k, v]) => [
      h("dt", {}, k), h("dd", {}, typeof v === "object" && v !== null ? statusValue(v) : String(v))]));
  }

  // A list of uniform objects (e.g. replicatedJobsStatus) reads best as a table, and so does a map of them
  // (a member's counts per ReplicatedJob); anything else as JSON.
  function statusValue(value) {
    const isObject = (v) => v && typeof v === "object" && !Array.isArray(v);
    if (isObject(value) && Object.keys(value).length && Object.values(value).every(isObject)) {
      value = Object.entries(value).map(([name, fields]) => ({ name, ...fields }));
    }
    if (Array.isArray(value) && value.length && value.every(isObject)) {
      const keys = [...new Set(value.flatMap(Object.keys))];
      return AP.table({ rows: value, columns: keys.map((k) => ({ key: k, label: k,
        cell: (row) => typeof row[k] === "object" && row[k] !== null ? JSON.stringify(row[k]) : String(row[k] ?? "") })) });
    }
    return h("code", {}, JSON.stringify(value));
  }

  function show(job) {
    document.getElementById("job-body").hidden = false;
    document.getElementById("job-title").textContent = `${job.name}`;
    document.title = `Job ${job.id} ${job.name} · Archipelago`;
    render(document.getElementById("job-summary"), h("div", { class: "card summary" }, h("dl", { class: "facts" },
      h("dt", {}, "State"), h("dd", { "data-testid": "job-state" }, badge(job.state),
        job.cancel_requested && job.state !== "Cancelled" ? h("span", { class: "muted" }, " cancel requested") : null,
        AP.me && AP.me.role === "admin" && !job.cancel_requested && !FINISHED.includes(job.state)
          ? AP.action("Cancel", `Cancel job ${job.id} (${job.name})? It is removed from every member.`,
              () => AP.send("DELETE", "/jobs/" + job.id), "cancel-job") : null),
      job.position ? [h("dt", {}, "Position"), h("dd", { "data-testid": "job-position" },
        `${job.position} in queue ${job.queue}`, h("span", { class: "muted" }, " (by priority, then submission)"))] : null,
      h("dt", {}, "ID"), h("dd", {}, job.id),
      h("dt", {}, "Tenant / queue"), h("dd", {}, `${job.tenant} / `, h("a", { href: "/jobs?queue=" + encodeURIComponent(job.queue) }, job.queue)),
      h("dt", {}, "Namespace"), h("dd", {}, job.namespace),
      h("dt", {}, "Priority"), h("dd", {}, `${job.priority_class} (${job.priority})`),
      h("dt", {}, "Placement mode"), h("dd", {}, job.placement_mode),
      h("dt", {}, "Demand"), h("dd", {}, Object.entries(job.demand).map(([r, v]) => `${r} ${v}`).join(", ") || "—"),
      h("dt", {}, "Cluster"), h("dd", { "data-testid": "job-clusters" }, job.clusters.join(", ") || "—"),
      h("dt", {}, "HyperNode"), h("dd", { "data-testid": "job-hypernodes" }, job.hypernodes.join(", ") || "—"),
      h("dt", {}, "Submitted"), h("dd", {}, AP.time(job.submitted_at), ` (${AP.age(job.submitted_at)} ago)`),
      h("dt", {}, "Started"), h("dd", {}, AP.time(job.started_at)),
      h("dt", {}, "Finished"), h("dd", {}, AP.time(job.finished_at)),
      h("dt", {}, "Restarts"), h("dd", {}, job.restart_count))));

    const waits = Object.entries(job.waiting_reasons || {});
    const waiting = job.state === "Queued";
    document.getElementById("waits-section").hidden = !waiting && !waits.length;
    render(document.getElementById("job-waits"),
      job.reason ? h("p", { class: waiting ? "callout" : "muted", "data-testid": "job-reason" }, job.reason) : null,
      waits.length ? AP.table({ testid: "waits-table", caption: "Why it waits, per cluster", rows: waits.map(([cluster, reason]) => ({ cluster, reason })),
        columns: [{ key: "cluster", label: "Cluster", header: true }, { key: "reason", label: "Reason" }] })
        : waiting ? empty("The scheduler has not looked at it yet.") : null);

    render(document.getElementById("job-placements"), job.placements.length ? AP.table({
      testid: "placements-table", caption: "Placements", rows: job.placements, rowKey: (p) => p.id, columns: [
        { key: "part", label: "Part", header: true, cell: (p) => p.part || "whole JobSet" },
        { key: "cluster", label: "Cluster", cell: (p) => h("a", { href: "/clusters/" + encodeURIComponent(p.cluster) }, p.cluster) },
        { key: "hypernode", label: "HyperNode", cell: (p) => h("span", { "data-testid": "placement-hypernode" }, p.hypernode || "—") },
        { key: "tier", label: "Tier", numeric: true, cell: (p) => p.tier ?? "—" },
        { key: "state", label: "State", cell: (p) => badge(p.state) },
        { key: "generation", label: "Gen.", numeric: true },
        { key: "nodes", label: "Nodes", cell: (p) => p.nodes.join(", ") || "—" },
        { key: "resources", label: "Resources", cell: (p) => Object.entries(p.resources).map(([r, v]) => `${r} ${v}`).join(", ") },
        { key: "overrides", label: "Overrides", cell: (p) => p.overrides.length
            ? h("ul", { class: "chips", "data-testid": "placement-overrides" }, p.overrides.map((name) => h("li", {}, name))) : "—" },
        { key: "last_error", label: "Last error", cell: (p) => p.last_error ? h("span", { class: "error small" }, p.last_error) : "" },
      ] }) : empty(job.state === "Queued" ? "Not placed yet." : "No placement."));

    render(document.getElementById("job-status"),
      h("h3", {}, "Aggregated"), keyValues(job.status, "aggregated-status"),
      job.placements.map((p) => [h("h3", {}, `On ${p.cluster}${p.part ? " (" + p.part + ")" : ""}`),
                                 keyValues(p.status, "member-status")]));

    render(document.getElementById("job-events"), job.events.length ? h("ol", { class: "timeline", "data-testid": "timeline" },
      job.events.map((e) => h("li", { class: "evtype-" + e.type.toLowerCase() },
        h("time", { datetime: e.time }, AP.clock(e.time)), " ", h("strong", {}, e.reason), " ", e.message))) : empty("No events."));
  }

  AP.live(() => api("/jobs/" + id), show);
})();
