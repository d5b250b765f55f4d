// Jobs: a sortable, filterable table; filters go to the API (tenant, queue, state, cluster), the name narrows here.
"use strict";
(async () => {
  if (!(await AP.start())) return;
  const { h, api, apiAll, badge, render, empty } = AP;
  const STATES = ["Queued", "Admitted", "Dispatching", "Starting", "Running", "Succeeded", "Failed", "Cancelled"];
  const form = document.getElementById("filters");
  const f = form.elements;
  const params = new URLSearchParams(location.search);
  const sort = { key: params.get("sort") || "id", dir: params.get("dir") || "desc" };
  let last = null;

  function options(select, values, chosen) {
    const keep = select.value || chosen || "";
    select.replaceChildren(h("option", { value: "" }, "All"), ...values.map((v) => h("option", { value: v }, v)));
    if (keep && !values.includes(keep)) select.append(h("option", { value: keep }, keep));
    select.value = keep;
  }
  options(f.state, STATES, params.get("state"));
  f.name.value = params.get("name") || "";
  const [tenants, queues, clusters] = await Promise.all([
    api("/tenants"), api("/queues"), api("/clusters").catch(() => [])]);
  options(f.tenant, tenants.map((t) => t.name), params.get("tenant"));
  options(f.queue, queues.map((q) => q.name), params.get("queue"));
  options(f.cluster, clusters.map((c) => c.name), params.get("cluster"));
  if (AP.me.role !== "admin") f.tenant.closest("label").hidden = true;

  const filters = () => ({ tenant: f.tenant.value, queue: f.queue.value, state: f.state.value,
                           cluster: f.cluster.value });
  function remember() {
    const query = new URLSearchParams(Object.entries({ ...filters(), name: f.name.value.trim(), sort: sort.key, dir: sort.dir })
      .filter(([, v]) => v));
    history.replaceState(null, "", "/jobs" + (query.toString() ? "?" + query : ""));
  }

  const load = async () => {
    const [jobs, counts] = await Promise.all([apiAll("/jobs", filters()), api("/jobs:counts", { queue: f.queue.value })]);
    return { jobs, counts };
  };

  // How many jobs are in each state (of the queue chosen), each a link that filters the table by it.
  function stateCounts(counts) {
    return h("ul", { class: "chips state-counts", "data-testid": "state-counts", "aria-label": "Job counts" },
      STATES.filter((state) => counts[state]).map((state) => h("li", { "data-state": state },
        h("a", { href: "#", onclick: (event) => { event.preventDefault(); f.state.value = state; remember(); feed.refresh(); } },
          `${state} ${counts[state]}`))));
  }

  function show({ jobs, counts }) {
    last = { jobs, counts };
    const needle = f.name.value.trim().toLowerCase();
    const rows = needle ? jobs.filter((j) => j.name.toLowerCase().includes(needle)) : jobs;
    const container = document.getElementById("jobs");
    render(container, stateCounts(counts),
      h("p", { class: "muted", "data-testid": "job-count", "aria-live": "polite" }, `${rows.length} job${rows.length === 1 ? "" : "s"}`),
      rows.length ? AP.table({
        testid: "jobs-table", caption: "Jobs", rows, rowKey: (j) => j.id, sortable: true, state: sort,
        onSort: (key) => { sort.dir = sort.key === key && sort.dir === "asc" ? "desc" : "asc"; sort.key = key; remember(); show(last); },
        columns: [
          { key: "id", label: "ID", numeric: true },
          { key: "name", label: "Name", header: true, cell: (j) => h("a", { href: "/jobs/" + j.id, "data-key": "j-" + j.id }, j.name) },
          { key: "tenant", label: "Tenant" },
          { key: "queue", label: "Queue" },
          { key: "state", label: "State", cell: (j) => badge(j.state) },
          { key: "cluster", label: "Cluster", sort: (j) => j.clusters.join(","), cell: (j) => j.clusters.join(", ") || "—" },
          { key: "hypernode", label: "HyperNode", sort: (j) => j.hypernodes.join(","), cell: (j) => j.hypernodes.join(", ") || "—" },
          { key: "age", label: "Age", sort: (j) => -Date.parse(j.submitted_at), cell: (j) => AP.age(j.submitted_at) },
          { key: "reason", label: "Why it waits", sort: false, cell: (j) => j.state === "Queued" && j.reason ? h("span", { class: "small" }, j.reason) : "" },
        ] }) : empty("No job matches."));
  }

  const feed = AP.live(load, show);
  form.addEventListener("change", () => { remember(); feed.refresh(); });
  f.name.addEventListener("input", () => { remember(); if (last) show(last); });
  form.addEventListener("submit", (event) => event.preventDefault());
})();
