// Sign in: check the token against the API, keep it in this tab's sessionStorage, go where the user was going.
"use strict";
(() => {
  const form = document.getElementById("login-form");
  const input = document.getElementById("token");
  const error = document.getElementById("login-error");
  input.focus();
  const sso = document.getElementById("sso");  // single sign-on, where configured: back to the same page after it
  if (sso) sso.href = "/login/sso?next=" + encodeURIComponent(new URLSearchParams(location.search).get("next") || "/");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    const answer = await fetch("/api/v1/whoami", { headers: { Authorization: "Bearer " + input.value.trim() } });
    if (!answer.ok) {
      error.textContent = answer.status === 401 ? "This token is unknown, revoked or expired." :
        "The broker answered " + answer.status + "; try again.";
      input.focus();
  const sso = document.getElementById("sso");  // single sign-on, where configured: back to the same page after it
  if (sso) sso.href = "/login/sso?next=" + encodeURIComponent(new URLSearchParams(location.search).get("next") || "/");
      return;
    }
    sessionStorage.setItem("archipelago.token", input.value.trim());
    sessionStorage.removeItem("archipelago.tenants");  // a pasted token speaks for one tenant, or is an admin's
    sessionStorage.removeItem("archipelago.tenant");
    const next = new URL(new URLSearchParams(location.search).get("next") || "/", location.origin);
    // never off-site: a path that starts with two slashes ("/.//evil.test" becomes "//evil.test") names another host
    const onSite = next.origin === location.origin && !next.pathname.startsWith("//");
    location.assign(onSite ? next.pathname + next.search : "/");
  });
})();
