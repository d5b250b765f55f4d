// Archipelago dashboard: shared helpers. Every page reads /api/v1 with the token kept in sessionStorage.
"use strict";

const AP = (() => {
  const TOKEN_KEY = "archipelago.token";
  const POLL_MS = 2000;

  const token = () => sessionStorage.getItem(TOKEN_KEY);
  // A signed-in user in several tenants acts for the one chosen in the top bar (single sign-on: sso.js)
  const tenants = () => (sessionStorage.getItem("archipelago.tenants") || "").split(",").filter(Boolean);
  const headers = (extra) => {
    const chosen = sessionStorage.getItem("archipelago.tenant");
    return { Authorization: "Bearer " + token(), Accept: "application/json",
             ...(chosen ? { "X-Archipelago-Tenant": chosen } : {}), ...(extra || {}) };
  };
  const toLogin = () => location.replace("/login?next=" + encodeURIComponent(location.pathname + location.search));

  class ApiError extends Error {
    constructor(status, detail) { super(detail); this.status = status; }
  }

  async function api(path, params) {
    const url = new URL("/api/v1" + path, location.origin);
    for (const [key, value] of Object.entries(params || {})) {
      if (value === undefined || value === null || value === "") continue;
      for (const one of [].concat(value)) url.searchParams.append(key, one);
    }
    const answer = await fetch(url, { headers: headers() });
    if (answer.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      toLogin();
      throw new ApiError(401, "signed out");
    }
    if (!answer.ok) {
      let detail = answer.statusText;
      try { detail = (await answer.json()).detail || detail; } catch (_) { /* not JSON */ }
      throw new ApiError(answer.status, detail);
    }
    return answer.json();
  }

  // A change an admin makes (PATCH, POST): the JSON body sent, the answer's JSON back, or an ApiError saying why.
  async function send(method, path, body) {
    const answer = await fetch(new URL("/api/v1" + path, location.origin), { method, body: JSON.stringify(body),
      headers: headers({ "Content-Type": "application/json" }) });
    if (!answer.ok) {
      let detail = answer.statusText;
      try { detail = (await answer.json()).detail || detail; } catch (_) { /* not JSON */ }
      throw new ApiError(answer.status, detail);
    }
    return answer.json();
  }

  // An admin's action on the page (cancel, cordon, drain): a button that asks first, then calls `run` and says how
  // it went beside itself. The page's next refresh shows what changed.
  function action(label, question, run, testid) {
    const said = h("span", { class: "muted", role: "status", "data-testid": testid + "-said" });
    const button = h("button", { type: "button", class: "action", "data-testid": testid, onclick: async () => {
      if (!window.confirm(question)) return;
      button.disabled = true;
      try {
        await run();
        said.textContent = ` ${label}: done`;
      } catch (exc) {
        said.textContent = ` ${label}: ${exc.message}`;
      }
      button.disabled = false;
    } }, label);
    return h("span", { class: "actions" }, button, said);
  }

  // Every page of a cursor listing (bounded: a dashboard never needs more than `max` rows).
  async function apiAll(path, params, max = 2000) {
    let items = [], cursor = null;
    do {
      const page = await api(path, { ...params, limit: 500, cursor });
      items = items.concat(page.items);
      cursor = page.next_cursor;
    } while (cursor && items.length < max);
    return items;
  }

  // h("a", {href: "/", class: "x", onclick: f}, "text", child, [more]) -> element
  function h(tag, attrs, ...children) {
    const svg = ["svg", "g", "rect", "text", "line", "polyline", "path", "title", "circle"].includes(tag);
    const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      else if (key === "text") el.textContent = value;
      else el.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  // Quantities: the API humanises amounts ("8", "500m", "512Gi"); bars need numbers.
  const BINARY = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
  const DECIMAL = { n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18 };
  function quantity(value) {
    if (value === undefined || value === null) return 0;
    if (typeof value === "number") return value;
    const match = /^([+-]?[\d.]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$/.exec(String(value).trim());
    if (!match) return 0;
    const unit = match[2] || "";
    return parseFloat(match[1]) * (BINARY[unit] || DECIMAL[unit] || 1);
  }
  // As the API's own format_quantity: cores or millicores for cpu, binary units for memory, counts otherwise.
  const general = (x) => String(parseFloat(x.toPrecision(6)));
  const readable = (x) => String(parseFloat(x.toPrecision(3)));  // "12.7Ti", not "12.6602Ti": a card's width
  function formatAmount(amount, resource) {
    if (resource === "cpu") return Number.isInteger(Math.round(amount * 1000) / 1000) ? String(Math.round(amount)) : Math.round(amount * 1000) + "m";
    if (resource === "memory" || resource === "ephemeral-storage") {
      for (const unit of ["Ti", "Gi", "Mi", "Ki"]) {
        if (amount >= BINARY[unit]) return readable(amount / BINARY[unit]) + unit;
      }
    }
    return general(amount);
  }
  const RESOURCES = [["nvidia.com/gpu", "GPU"], ["cpu", "CPU"], ["memory", "Memory"]];

  // A capacity bar: used / free / total in words for eyes and screen readers alike.
  // `free` defaults to total - used; the inventory's own figure leaves out nodes that take no pods.
  function bar(label, resource, used, total, free = Math.max(0, total - used)) {
    const pct = total > 0 ? Math.min(100, (used / total) * 100) : 0;
    const words = `${formatAmount(used, resource)} used / ${formatAmount(free, resource)} free / ` +
                  `${formatAmount(total, resource)} total`;
    return h("div", { class: "capbar", "data-resource": resource },
      h("div", { class: "capbar-head" }, h("span", { class: "capbar-label" }, label),
        h("span", { class: "capbar-text", "data-testid": "capbar-text" }, words)),
      h("div", { class: "capbar-track " + loadClass(pct / 100), role: "meter", "aria-label": `${label}: ${words}`,
                 "aria-valuemin": 0, "aria-valuemax": +total.toFixed(3), "aria-valuenow": +used.toFixed(3),
                 "aria-valuetext": words },
        h("div", { class: "capbar-fill", style: `width:${pct.toFixed(1)}%` })));
  }
  const loadClass = (ratio) => ratio >= 0.9 ? "load-high" : ratio >= 0.6 ? "load-mid" : ratio > 0 ? "load-low" : "load-none";

  function badge(state) {
    return h("span", { class: "badge state-" + String(state).toLowerCase(), "data-testid": "state" }, state);
  }

  // The API's times are UTC; SQLite hands some back without an offset.
  const parseTime = (iso) => Date.parse(/(Z|[+-]\d\d:?\d\d)$/.test(iso) ? iso : iso + "Z");
  function age(iso, until) {
    if (!iso) return "—";
    return duration(Math.max(0, ((until ? parseTime(until) : Date.now()) - parseTime(iso)) / 1000));
  }
  function duration(seconds) {
    if (seconds < 60) return `${Math.floor(seconds)}s`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${Math.floor(seconds % 60)}s`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
    return `${Math.floor(seconds / 86400)}d ${Math.floor((seconds % 86400) / 3600)}h`;
  }
  // Where a cluster's HyperNode tree comes from: its HyperNode objects, or its node labels by a recipe.
  function topologySource(cluster) {
    const source = cluster.hypernode_source;
    if (source === "crd") return "HyperNode objects";
    if (source && source.startsWith("labels:")) {
      return `node labels, recipe ${source.slice(7)}${cluster.topology_recipe === "auto" ? " (auto)" : ""}`;
    }
    return source === "labels" ? "node labels, the global list" : "none";
  }
  const time = (iso) => iso ? new Date(parseTime(iso)).toLocaleString([], { hour12: false }) : "—";
  const clock = (iso) => iso ? new Date(parseTime(iso)).toLocaleTimeString([], { hour12: false }) : "—";

  function empty(text) { return h("p", { class: "empty" }, text); }

  // Replace a container's content, keeping keyboard focus on the element with the same data-key.
  function render(container, ...nodes) {
    const active = document.activeElement;
    const key = active && container.contains(active) ? active.getAttribute("data-key") : null;
    container.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
    if (key) {
      const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
      if (again) again.focus();
    }
  }

  // A table; `columns`: [{key, label, cell(row) -> node|string, sort(row) -> value, numeric}].
  // With `sortable`, header buttons sort client-side and announce it through aria-sort.
  function table({ columns, rows, rowKey, caption, sortable, state, testid, onSort }) {
    let sorted = rows;
    if (sortable && state && state.key) {
      const column = columns.find((c) => c.key === state.key);
      const value = column.sort || ((row) => row[column.key]);
      sorted = [...rows].sort((a, b) => {
        const x = value(a), y = value(b);
        const order = x === y ? 0 : (x === null || x === undefined) ? 1 : (y === null || y === undefined) ? -1 : x < y ? -1 : 1;
        return state.dir === "desc" ? -order : order;
      });
    }
    const head = h("tr", {}, columns.map((column) => {
      if (!sortable || column.sort === false) return h("th", { scope: "col", "data-col": column.key }, column.label);
      const active = state && state.key === column.key;
      return h("th", { scope: "col", "data-col": column.key, "aria-sort": active ? (state.dir === "desc" ? "descending" : "ascending") : "none" },
        h("button", { type: "button", class: "sort", "data-key": "sort-" + column.key,
                      onclick: () => onSort(column.key) },
          column.label, h("span", { class: "arrow", "aria-hidden": "true" }, active ? (state.dir === "desc" ? " ▼" : " ▲") : "")));
    }));
    const body = sorted.map((row) => h("tr", { "data-row": rowKey ? rowKey(row) : null },
      columns.map((column) => h(column.header ? "th" : "td", { class: column.numeric ? "num" : null, scope: column.header ? "row" : null,
                                                              "data-col": column.key },
        column.cell ? column.cell(row) : row[column.key]))));
    return h("div", { class: "table-wrap" },
      h("table", { "data-testid": testid }, caption ? h("caption", { class: "visually-hidden" }, caption) : null,
        h("thead", {}, head), h("tbody", {}, body)));
  }

  // Poll `load` every 2 s (paused while the tab is hidden); `show` renders only when the data changed.
  function live(load, show) {
    const status = document.getElementById("live-status");
    const error = document.getElementById("live-error");
    let last = null, timer = null;
    async function tick() {
      clearTimeout(timer);
      try {
        const data = await load();
        const text = JSON.stringify(data);
        if (text !== last) { last = text; show(data); }
        error.hidden = true;
        status.textContent = "Live · updated " + new Date().toLocaleTimeString([], { hour12: false });
        status.dataset.updated = String(Date.now());
      } catch (exc) {
        if (exc.status !== 401) {
          status.textContent = "Not updated at " + new Date().toLocaleTimeString([], { hour12: false });
          error.textContent = exc.status === 403 || exc.status === 404 ? exc.message : "Cannot reach the broker: " + exc.message;
          error.hidden = false;
        }
      }
      if (!document.hidden) timer = setTimeout(tick, POLL_MS);
    }
    document.addEventListener("visibilitychange", () => { if (!document.hidden) tick(); });
    tick();
    return { refresh: () => { last = null; tick(); } };
  }

  async function start() {
    if (!token()) { toLogin(); return false; }
    document.getElementById("logout").addEventListener("click", () => {
      for (const key of [TOKEN_KEY, "archipelago.tenants", "archipelago.tenant"]) sessionStorage.removeItem(key);
      location.assign("/login");
    });
    try {
      const me = await api("/whoami");
      const whoami = document.getElementById("whoami");
      whoami.textContent = me.role === "admin" ? "admin" : "tenant " + me.tenant;
      if (me.role !== "admin" && tenants().length > 1) {  // several tenants: choose which one this tab acts for
        const choice = h("select", { id: "tenant-choice", "aria-label": "Act for tenant" },
          ...tenants().map((name) => h("option", { value: name, selected: name === me.tenant }, name)));
        choice.addEventListener("change", () => {
          sessionStorage.setItem("archipelago.tenant", choice.value);
          location.reload();
        });
        whoami.replaceChildren("tenant ", choice);
      }
      AP.me = me;
    } catch (exc) { return false; }
    return true;
  }

  return { TOKEN_KEY, api, apiAll, send, action, h, quantity, formatAmount, RESOURCES, bar, badge, loadClass, parseTime, age, duration, time, clock,
           topologySource,
           empty, render, table, live, start, me: null };
})();
