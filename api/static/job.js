// One job: its state, placements (cluster, HyperNode, nodes), aggregated and per-member status, why it waits, timeline.
"use strict";
(async () => {
  if (!(await AP.start())) return;
  const { h, api, badge, render, empty } = AP;
  const id = document.getElementById("job-title").dataset.jobId;
  const FINISHED = ["Succeeded", "Failed", "Cancelled"];

  const COUNTS = ["ready", "active", "succeeded", "failed", "suspended"];

  // A JobSet's status as people read it: its ReplicatedJobs' Jobs counted by state, its conditions, its restarts.
  // A condition's time is the broker's, when it first saw it (the member's own clock may be skewed; a simulated one
  // runs fast): the member's time is in its tooltip.
  function statusView(status, testid) {
    if (!status || !Object.keys(status).length) return empty("No status reported yet.");
    const rjobs = status.replicatedJobsStatus
      || Object.entries(status.replicatedJobs || {}).map(([name, counts]) => ({ name, ...counts }));
    const expected = status.expected || {};
    const conditions = status.conditions || [];
    const restarts = String(status.restarts ?? 0) + (status.restartsCountTowardsMax != null
      && status.restartsCountTowardsMax !== status.restarts ? ` (${status.restartsCountTowardsMax} toward maxRestarts)` : "");
    const facts = [["Restarts", restarts], ["Terminal state", status.terminalState], ["Drift", status.drift],
                   ["Member's copy", status.uid ? `uid ${status.uid}, generation ${status.generation ?? "—"}` : null]];
    return h("div", { "data-testid": testid },
      h("dl", { class: "facts" }, facts.filter(([, v]) => v).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      rjobs.length ? AP.table({ testid: "replicated-jobs", caption: "Jobs of each ReplicatedJob", rows: rjobs,
        rowKey: (r) => r.name, columns: [
          { key: "name", label: "ReplicatedJob", header: true },
          ...(Object.keys(expected).length ? [{ key: "replicas", label: "Replicas", numeric: true,
                                                cell: (r) => expected[r.name] ? expected[r.name].replicas : "—" }] : []),
          ...COUNTS.map((k) => ({ key: k, label: k[0].toUpperCase() + k.slice(1), numeric: true, cell: (r) => r[k] ?? 0 }))] })
        : null,
      conditions.length ? AP.table({ testid: "conditions", caption: "Conditions", rows: conditions, columns: [
          { key: "type", label: "Condition", header: true },
          { key: "status", label: "Status" },
          { key: "reason", label: "Reason", cell: (c) => c.reason || "" },
          { key: "message", label: "Message", cell: (c) => c.message || "" },
          ...(conditions.some((c) => c.cluster) ? [{ key: "where", label: "Where",
              cell: (c) => c.part ? `${c.part} on ${c.cluster}` : c.cluster || "" }] : []),
          { key: "observedTime", label: "Since", cell: since }] })
        : h("p", { class: "muted" }, "No conditions yet."));
  }

  function since(condition) {
    const member = condition.lastTransitionTime ? `${condition.lastTransitionTime} by the member's clock` : "";
    if (!condition.observedTime) return h("span", { title: member }, condition.lastTransitionTime ? AP.time(condition.lastTransitionTime) : "—");
    return h("time", { datetime: condition.observedTime, title: member },
      AP.clock(condition.observedTime), h("span", { class: "muted" }, ` (${AP.age(condition.observedTime)} ago)`));
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
      job.expected ? [h("dt", {}, "Expected start"), h("dd", { "data-testid": "job-expected" },
        job.expected_start ? [h("time", { datetime: job.expected_start }, AP.time(job.expected_start)), " — "] : null,
        job.expected, job.forecast && job.forecast.runtime_source ? h("span", { class: "muted" },
          ` (expected to run ${AP.duration(job.forecast.runtime)}: ${job.forecast.runtime_source})`) : null)] : null,
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
      h("h3", {}, "Aggregated"), statusView(job.status, "aggregated-status"),
      job.placements.map((p) => [h("h3", {}, `On ${p.cluster}${p.part ? " (" + p.part + ")" : ""}, placement ${p.id}`),
                                 statusView(p.status, "member-status")]));

    render(document.getElementById("job-events"), job.events.length ? h("ol", { class: "timeline", "data-testid": "timeline" },
      job.events.map((e) => h("li", { class: "evtype-" + e.type.toLowerCase() },
        h("time", { datetime: e.time }, AP.clock(e.time)), " ", h("strong", {}, e.reason), " ", e.message))) : empty("No events."));
  }

  AP.live(() => api("/jobs/" + id), show);
})();
