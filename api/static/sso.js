// Single sign-on, its last step: the ID token the broker got for this tab is kept in sessionStorage, as a pasted
// token is, and the user goes where it was going (never off-site).
"use strict";
(() => {
  const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
  sessionStorage.setItem("archipelago.token", meta("archipelago-token"));
  const tenants = meta("archipelago-tenants");  // a user in several tenants acts for the first until it chooses
  sessionStorage.setItem("archipelago.tenants", tenants);
  if (tenants.includes(",")) sessionStorage.setItem("archipelago.tenant", tenants.split(",")[0]);
  else sessionStorage.removeItem("archipelago.tenant");
  const next = new URL(meta("archipelago-next") || "/", location.origin);
  const onSite = next.origin === location.origin && !next.pathname.startsWith("//");
  location.replace(onSite ? next.pathname + next.search : "/");
})();
