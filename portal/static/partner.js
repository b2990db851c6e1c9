// The partner view: a session from a portal link, over the partner API (/v1). The partner's
// own subscriptions only: create (the secret shown once, with a copy button), delete,
// enable, change the URL and event types, rotate the secret, send a test delivery, the
// delivery log with its attempts (a finished delivery resent), replays by range with their
// progress, and a search by load id (`loads.js`).

import {
  h, replace, field, check, checked, table, props, time, msOf, localInput, badge, errorBox,
  action, form, secretOnce, notice, select, watchReplay, EVENT_TYPES, REPLAY_STATUSES,
} from "./ui.js";
import { partner as api, seg } from "./api.js";
import { attemptsTable, testResult } from "./operator.js";
import { notificationEndpoint } from "./notices.js";
import { findLoad, retargetForm } from "./loads.js";

let frame;

/** Starts the partner view: exchanges `token` (a portal link's, already out of the address
 *  bar) for a session, or uses the session the browser has (`token` null). */
export async function startPartner(f, token) {
  frame = f;
  frame.nav([]);
  if (token !== null) {
    frame.show(h("p", { class: "muted" }, "Opening your portal link…"));
    try {
      await api.exchange(token);
    } catch (err) {
      return expired(err);
    }
  }
  return list("active");
}

/** A link that did not work: what happened and what to do. */
function expired(err) {
  frame.who();
  frame.show(
    h("h2", null, "This portal link does not work"),
    h("p", null, "A portal link works once and for 15 minutes. Ask your operator for a new link, then open it in this browser."),
    errorBox(err));
}

function header(current) {
  const s = api.session;
  frame.who("Partner ", h("strong", { class: "mono", id: "client-id" }, s.clientId),
    " · session until ", time(s.expiresAt), " ",
    h("button", { type: "button", class: "secondary", id: "sign-out", onclick: async () => {
      try { await api.signOut(); } catch { /* signed out on this side either way */ }
      notice(null);
      frame.home();
    } }, "Sign out"));
  frame.nav([["Active", () => list("active")], ["Disabled", () => list("disabled")], ["New subscription", () => create()], ["Notices", () => notices()], ["Find a load", () => { header("Find a load"); findLoad(frame, failed); }]], current);
}

/** The notification endpoint's page (`notices.js`). */
function notices() {
  header("Notices");
  return notificationEndpoint(frame, failed);
}

/** A failed call: a 401 means the session is over. */
function failed(err, out) {
  if (err.status === 401) return expired(err);
  return replace(out, errorBox(err));
}

async function list(status) {
  header(status === "active" ? "Active" : "Disabled");
  const out = h("div", { id: "subscription-list" });
  const detail = h("div", { id: "subscription-detail" });
  frame.show(h("h2", null, status === "active" ? "Your active subscriptions" : "Your disabled subscriptions"), out, detail);
  try {
    const page = await api.get("/webhooks", { status, limit: 100 });
    replace(out, table(`${status} subscriptions`, [
      ["URL", (s) => h("span", { class: "url" }, s.url)],
      ["Event types", (s) => s.eventTypes.join(", ")],
      ["Status", (s) => badge(s.status)],
      ["Created", (s) => time(s.createdAt)],
      ["Actions", (s) => h("button", { type: "button", class: "secondary", "aria-label": `Open ${s.id}`, onclick: () => open(s.id, detail).catch((err) => failed(err, detail)) }, "Open")],
    ], page.data, status === "active"
      ? h("span", null, "You have no active subscription yet. ", h("button", { type: "button", onclick: () => create() }, "Create your first subscription"))
      : "No subscription is disabled: every one of yours is delivering."));
  } catch (err) {
    failed(err, out);
  }
}

function create() {
  header("New subscription");
  const url = h("input", { type: "url", name: "url", required: true, class: "wide", placeholder: "https://hooks.example.com/loads" });
  const scheme = select("signatureScheme", [["spec", "spec (X-Service-Signature, hex HMAC-SHA256)"], ["standard", "Standard Webhooks"]]);
  const types = h("fieldset", null, h("legend", null, "Event types"), EVENT_TYPES.map((t) => check(t, "eventType", t, true)));
  const headerRows = h("div", { class: "header-rows" });
  const addHeader = () => {
    const n = headerRows.children.length + 1;
    headerRows.append(h("div", { class: "row header-row" },
      field(`Header ${n} name`, h("input", { type: "text", name: "headerName", placeholder: "X-Receiver-Token" })),
      field(`Header ${n} value`, h("input", { type: "text", name: "headerValue" }))));
  };
  addHeader();
  const out = h("div", { id: "create-out" });
  frame.show(
    h("h2", null, "New subscription"),
    form(null, [
      field("Endpoint URL (https)", url), types, field("Signature scheme", scheme),
      h("fieldset", null, h("legend", null, "Headers sent with every delivery (optional)"), headerRows,
        h("button", { type: "button", class: "secondary", onclick: addHeader }, "Add a header")),
      h("button", { type: "submit", id: "create-subscription" }, "Create the subscription")], async (f) => {
      const body = { url: url.value.trim(), eventTypes: checked(f, "eventType"), signatureScheme: scheme.value };
      const headers = {};
      for (const row of headerRows.children) {
        const [name, value] = row.querySelectorAll("input");
        if (name.value.trim()) headers[name.value.trim()] = value.value;
      }
      if (Object.keys(headers).length) body.headers = headers;
      const s = (await api.post("/webhooks", body)).data;
      const detail = h("div", { id: "subscription-detail" });
      frame.show(h("h2", null, "Subscription created"),
        secretOnce("Signing secret", s.signingSecret),
        h("p", null, "Your receiver verifies every delivery with this secret (see the verifying guide). Next: send a test delivery to check your receiver."),
        detail);
      await open(s.id, detail);
    }, out),
    out);
  url.focus();
}

/** One subscription: its settings, actions, delivery log and replays. */
async function open(id, out) {
  const s = (await api.get(`/webhooks/${seg(id)}`)).data;
  const result = h("div", { class: "action-result", id: "action-result" });
  const log = h("div", { id: "delivery-log" });
  const redraw = () => open(id, out);
  const overlap = h("input", { type: "number", name: "overlapSeconds", min: 0, max: 604800, value: 3600 });
  const confirmDelete = h("button", { type: "button", class: "danger", hidden: true, id: "confirm-delete" }, "Yes, delete it");
  confirmDelete.addEventListener("click", async () => {
    try {
      await api.del(`/webhooks/${seg(id)}`);
      notice(h("div", { class: "success" }, `Deleted ${id}: no more deliveries.`));
      list("active");
    } catch (err) { failed(err, result); }
  });
  replace(out, h("section", { class: "panel", "aria-labelledby": "ps-h", id: "subscription-panel" },
    h("h3", { id: "ps-h" }, "Subscription ", h("span", { class: "mono" }, s.id)),
    props([["Status", badge(s.status)], ["URL", h("span", { class: "url sub-url" }, s.url)],
      ["Event types", s.eventTypes.join(", ")], ["Signature scheme", s.signatureScheme],
      ["Header names", h("span", { class: "header-names" }, s.headerNames.length ? s.headerNames.join(", ") : "none")],
      ["Ordering", s.ordering], ["Created", time(s.createdAt)],
      ["Disabled", s.status === "disabled" ? [time(s.disabledAt), ` (${s.disabledReason})`] : "—"],
      ["Deliveries failed in a row", String(s.consecutiveFailures)]]),
    h("div", { class: "row" },
      action("Send a test delivery", null, async () => testResult((await api.post(`/webhooks/${seg(id)}/test`)).data), result),
      s.status === "disabled"
        ? action("Enable", null, async () => { await api.post(`/webhooks/${seg(id)}/enable`); await redraw(); notice(h("div", { class: "success" }, `Enabled ${id}.`)); }, result)
        : null,
      action("Delivery log", "secondary", async () => deliveryLog(id, log), result),
      h("button", { type: "button", class: "danger", onclick: () => { confirmDelete.hidden = false; confirmDelete.focus(); } }, "Delete"),
      confirmDelete),
    form("inline", [field("Keep the old secret signing for (seconds)", overlap),
      h("button", { type: "submit", class: "secondary", id: "rotate-secret" }, "Rotate the secret")], async () => {
      const r = (await api.post(`/webhooks/${seg(id)}/rotate-secret`, { overlapSeconds: Number(overlap.value) || 0 })).data;
      return h("div", null, secretOnce("New signing secret", r.signingSecret),
        h("p", { class: "muted" }, r.previousSecretExpiresAt ? ["The previous secret stops signing at ", time(r.previousSecretExpiresAt), "."] : "The previous secret no longer signs."));
    }, result),
    replayForm(id),
    retargetForm(s, redraw),
    result, log));
}

/** The subscription's deliveries, newest page first, each with its attempts. */
async function deliveryLog(id, out) {
  const status = select("status", ["pending", "succeeded", "failed", "cancelled", "skipped"], "any status");
  const rows = h("div");
  let cursor = null;
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "Load more");
  const items = [];
  const load = async (next) => {
    if (!next) { items.length = 0; cursor = null; }
    const page = await api.get(`/webhooks/${seg(id)}/deliveries`, { status: status.value, cursor, limit: 50 });
    items.push(...page.data);
    cursor = page.nextCursor;
    more.hidden = !page.hasMore;
    replace(rows, items.length
      ? items.map((d) => {
        const resent = h("div");
        return h("details", { class: "panel delivery", "data-delivery": d.id },
          h("summary", null, badge(d.status), " ", d.eventType, " · ", time(d.createdAt), " · ",
            h("span", { class: "mono" }, d.id), ` · ${d.attempts.length} attempt(s)`),
          attemptsTable(d.attempts),
          // A finished delivery can be sent again, under the same delivery id.
          d.status === "pending" ? null : action("Resend this delivery", "secondary", async () => {
            await api.post(`/webhooks/${seg(id)}/deliveries/${seg(d.id)}/replay`);
            return h("div", { class: "success" }, "Resending: a new run is queued under the same delivery id.");
          }, resent),
          resent);
      })
      : h("div", { class: "empty" }, "No delivery yet. Deliveries appear here when a load event you subscribe to is published; a test delivery is not stored."));
  };
  more.addEventListener("click", () => load(true).catch((err) => failed(err, rows)));
  status.addEventListener("change", () => load(false).catch((err) => failed(err, rows)));
  replace(out, h("section", { "aria-labelledby": "dl-h" },
    h("h3", { id: "dl-h" }, "Delivery log"),
    h("div", { class: "row" }, field("Status", status),
      h("button", { type: "button", class: "secondary", id: "refresh-log", onclick: () => load(false).catch((err) => failed(err, rows)) }, "Refresh")),
    rows, more));
  await load(false);
}

/** Replays of the subscription's deliveries by range, with live progress. */
function replayForm(id) {
  const since = h("input", { type: "datetime-local", name: "since", value: localInput(Date.now() - 86400000) });
  const until = h("input", { type: "datetime-local", name: "until" });
  const out = h("div");
  const statuses = h("fieldset", null, h("legend", null, "Statuses to replay"),
    REPLAY_STATUSES.map((s) => check(s, "status", s, s === "failed" || s === "skipped")));
  return h("details", { class: "panel" }, h("summary", null, "Replay deliveries of a time range"),
    form(null, [h("div", { class: "row" }, field("Created since", since), field("Created before (optional)", until)), statuses,
      h("button", { type: "submit", class: "secondary" }, "Replay")], async (f) => {
      const body = { since: msOf(since), status: checked(f, "status") };
      if (body.since === undefined) throw new Error("Choose the start of the range.");
      if (msOf(until) !== undefined) body.until = msOf(until);
      const job = (await api.post(`/webhooks/${seg(id)}/replays`, body)).data;
      watchReplay(job, async (j) => (await api.get(`/replays/${seg(j)}`)).data,
        async (j) => (await api.post(`/replays/${seg(j)}/cancel`)).data, out);
    }, out), out);
}
