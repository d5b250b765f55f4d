// Queues: per tenant and queue, fair share target vs. dominant share, quota and borrowing, depth, wait, last hour.
"use strict";
(async () => {
  if (!(await AP.start())) return;
  const { h, api, render, empty, quantity } = AP;
  const W = 240, H = 64, PAD = 4;
  const pct = (x) => `${(x * 100).toFixed(1)}%`;
  const NAMES = Object.fromEntries(AP.RESOURCES);
  const LEVELS = ["privileged", "baseline", "restricted"];

  async function load() {
    const [queues, tenants, history] = await Promise.all([api("/queues"), api("/tenants"),
                                                          api("/queue-history", { minutes: 60, points: 60 })]);
    return { queues, tenants, history };
  }

  // a queue or a tenant: its dominant share (actual) against its fair share (the mark)
  function shareBar(queue) {
    const words = `dominant share ${pct(queue.dominant_share)}, fair share ${pct(queue.fair_share)}`;
    const over = queue.dominant_share > queue.fair_share + 1e-9;
    return h("div", { class: "share" },
      h("div", { class: "share-track", role: "img", "aria-label": words },
        h("div", { class: "share-fill" + (over ? " over" : ""), style: `width:${Math.min(100, queue.dominant_share * 100)}%` }),
        h("div", { class: "share-target", style: `left:${Math.min(100, queue.fair_share * 100)}%` })),
      h("div", { class: "share-text" },
        h("span", { "data-testid": "dominant-share" }, pct(queue.dominant_share)), " of ",
        h("span", { "data-testid": "fair-share" }, pct(queue.fair_share)), " fair"));
  }

  // The quotas a queue with work waiting has used up ("" if none): what waits there can run only on borrowed room.
  function atQuota(queue) {
    if (!queue.pending) return "";
    return Object.entries(queue.nominal_quota)
      .filter(([r, nominal]) => quantity(queue.usage[r] || "0") >= quantity(nominal))
      .map(([r, nominal]) => `${nominal} ${NAMES[r] || r}`).join(", ");
  }

  function quota(queue) {
    const order = (r) => { const i = AP.RESOURCES.findIndex(([known]) => known === r); return i < 0 ? 99 : i; };
    const resources = [...new Set([...Object.keys(queue.nominal_quota), ...Object.keys(queue.usage)])]
      .sort((a, b) => order(a) - order(b) || a.localeCompare(b));
    if (!resources.length) return "—";
    return h("ul", { class: "quota" }, resources.map((r) => {
      const used = quantity(queue.usage[r] || "0"), nominal = queue.nominal_quota[r];
      const limit = queue.borrowing_limit && queue.borrowing_limit[r];
      const label = NAMES[r] || r;
      if (nominal === undefined) return h("li", {}, `${label} ${queue.usage[r] || "0"} used, no quota`);
      const borrowed = Math.max(0, used - quantity(nominal));
      return h("li", { "data-testid": "quota-" + r },
        `${label} ${queue.usage[r] || "0"} / ${nominal}`,
        borrowed > 0 ? h("span", { class: "borrow" }, ` borrowing ${AP.formatAmount(borrowed, r)}`) : null,
        queue.lent[r] ? h("span", { class: "lend", "data-testid": "lent-" + r }, ` lending ${queue.lent[r]}`) : null,
        limit != null ? h("span", { class: "muted" }, ` (may borrow ${limit})`) : null);
    }));
  }

  function chart(series, queue) {
    if (!series) return "—";
    const n = series.pending.length, maxPending = Math.max(1, ...series.pending);
    const x = (i) => PAD + (i * (W - 2 * PAD)) / Math.max(1, n - 1);
    const yShare = (s) => H - PAD - Math.min(1, s) * (H - 2 * PAD);
    const barW = Math.max(1, (W - 2 * PAD) / n - 1);
    const line = series.dominant_share.map((s, i) => `${x(i).toFixed(1)},${yShare(s).toFixed(1)}`).join(" ");
    const now = series.pending[n - 1];
    const words = `Last hour: pending now ${now}, at most ${Math.max(...series.pending)}; dominant share now ` +
                  `${pct(series.dominant_share[n - 1])}, at most ${pct(Math.max(...series.dominant_share))}; ` +
                  `fair share ${pct(queue.fair_share)}`;
    return h("svg", { class: "spark", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": words },
      h("title", {}, words),
      h("rect", { class: "spark-bg", x: 0, y: 0, width: W, height: H, rx: 4 }),
      series.pending.map((p, i) => p ? h("rect", { class: "spark-pending", x: x(i) - barW / 2, width: barW,
        y: H - PAD - (p / maxPending) * (H - 2 * PAD) * 0.8, height: (p / maxPending) * (H - 2 * PAD) * 0.8 }) : null),
      h("line", { class: "spark-fair", x1: PAD, x2: W - PAD, y1: yShare(queue.fair_share), y2: yShare(queue.fair_share) }),
      h("polyline", { class: "spark-share", points: line }));
  }

  // The Standard a tenant's pods are held to: an admin changes it here (PATCH), a tenant reads it.
  function podSecurity(tenant) {
    if (!AP.me || AP.me.role !== "admin") return h("span", { "data-testid": "tenant-pod-security" }, tenant.pod_security);
    const said = h("span", { class: "muted", role: "status", "data-testid": "tenant-pod-security-said" });
    const select = h("select", { "aria-label": `Pod Security level of ${tenant.name}`, "data-testid": "tenant-pod-security",
      onchange: async () => {
        select.disabled = true;
        try {
          const changed = await AP.send("PATCH", "/tenants/" + encodeURIComponent(tenant.name), { pod_security: select.value });
          said.textContent = ` now ${changed.pod_security}`;
        } catch (exc) {
          said.textContent = ` not changed: ${exc.message}`;
          select.value = tenant.pod_security;
        }
        select.disabled = false;
      } }, LEVELS.map((level) => h("option", { value: level, selected: level === tenant.pod_security }, level)));
    return [select, said];
  }

  function show({ queues, tenants: tenantList, history }) {
    const container = document.getElementById("queues");
    if (!queues.length) return render(container, empty("No queue yet: POST /api/v1/queues."));
    const series = Object.fromEntries(history.queues.map((q) => [q.name, q]));
    const tenantOf = Object.fromEntries(tenantList.map((t) => [t.name, t]));
    const tenants = [...new Set(queues.map((q) => q.tenant))];
    render(container, tenants.map((tenant) => h("section", { class: "card tenant", "data-tenant": tenant, "aria-labelledby": "t-" + tenant },
      h("h2", { id: "t-" + tenant }, "Tenant ", tenant),
      tenantOf[tenant] ? h("div", { class: "tenant-share", "data-testid": "tenant-share" },
        h("span", {}, "weight ", h("span", { "data-testid": "tenant-weight" }, tenantOf[tenant].weight)),
        h("span", {}, " Pod Security ", podSecurity(tenantOf[tenant])),
        shareBar(tenantOf[tenant])) : null,
      AP.table({ testid: "queues-table", caption: `Queues of ${tenant}`, rowKey: (q) => q.name,
        rows: queues.filter((q) => q.tenant === tenant), columns: [
          { key: "name", label: "Queue", header: true, cell: (q) => h("a", { href: "/jobs?queue=" + encodeURIComponent(q.name), "data-key": "q-" + q.name },
              q.name, q.default ? h("span", { class: "muted" }, " (default)") : null) },
          { key: "weight", label: "Weight", numeric: true },
          { key: "share", label: "Dominant vs fair share", cell: shareBar },
          { key: "quota", label: "Quota use", cell: quota },
          { key: "pending", label: "Pending", numeric: true, cell: (q) => [h("span", { "data-testid": "pending" }, q.pending),
              atQuota(q) ? h("span", { class: "badge at-quota", "data-testid": "at-quota",
                title: `it uses all its quota of ${atQuota(q)}: what waits there runs only on borrowed room, or once ` +
                       "its running jobs end" }, "at quota") : null] },
          { key: "running", label: "Admitted / running", numeric: true, cell: (q) => h("span", { "data-testid": "running" }, q.running) },
          { key: "oldest", label: "Oldest wait", cell: (q) => h("span", { "data-testid": "oldest-wait" }, AP.age(q.oldest_pending_at)) },
          { key: "next", label: "Next start", cell: (q) => q.next_expected_start
              ? h("time", { datetime: q.next_expected_start, "data-testid": "next-start",
                            title: "the earliest expected start of its waiting jobs (the forecast)" }, AP.clock(q.next_expected_start))
              : "—" },
          { key: "chart", label: "Last hour", cell: (q) => chart(series[q.name], q) },
        ] }))),
      h("p", { class: "muted legend" }, h("span", { class: "swatch spark-pending-swatch", "aria-hidden": "true" }), " pending depth  ",
        h("span", { class: "swatch spark-share-swatch", "aria-hidden": "true" }), " dominant share  ",
        h("span", { class: "swatch spark-fair-swatch", "aria-hidden": "true" }), " fair share"));
  }

  AP.live(load, show);
})();
