// The operator view: the admin token's /internal/v1 API. Sections: subscriptions (disabled
// ones across clients or of one client, active ones of a client, the reason filter;
// enable/disable, test, history), delivery search with
// attempt detail and single replays, replays by range with live progress, and clients
// (their keys: issue, revoke; and partner portal links).

import {
  h, replace, field, check, checked, table, props, time, msOf, localInput, badge, errorBox,
  action, form, secretOnce, notice, select, watchReplay,
  EVENT_TYPES, DELIVERY_STATUSES, REPLAY_STATUSES,
} from "./ui.js";
import { operator as api, seg } from "./api.js";

let frame;

const SECTIONS = [
  ["Subscriptions", () => subscriptions()],
  ["Deliveries", () => deliveries({})],
  ["Replays", () => replays({})],
  ["Clients", () => clients("")],
];

/** Starts the operator view: the sign-in form, or the subscriptions with a stored token. */
export function startOperator(f) {
  frame = f;
  if (!api.token()) return signIn();
  return subscriptions();
}

function nav(current) {
  frame.nav(SECTIONS, current);
  frame.who("Operator ", h("button", { type: "button", class: "secondary", id: "sign-out", onclick: () => { api.signOut(); notice(null); frame.home(); } }, "Sign out"));
}

function signIn() {
  frame.nav([]);
  frame.who();
  const token = h("input", { type: "password", name: "token", autocomplete: "current-password", required: true, class: "wide" });
  const out = h("div");
  frame.show(
    h("h2", null, "Operator sign-in"),
    form("inline", [field("Admin token", token, "Kept in this tab only (sessionStorage), never in the address bar."),
      h("button", { type: "submit" }, "Sign in")], async () => {
      if (!token.value) throw new Error("Enter the admin token.");
      api.signIn(token.value);
      try {
        await api.get("/settings");
      } catch (err) {
        api.signOut();
        throw err;
      }
      return subscriptions();
    }, out),
    out);
  token.focus();
}

// ---------------------------------------------------------------------------------------
// Subscriptions

const REASONS = [["repeated_failures", "repeated failures"], ["gone", "gone (410)"], ["operator", "operator"], ["deleted", "deleted by its owner"], ["*", "another reason code"]];

async function subscriptions() {
  nav("Subscriptions");
  const status = select("status", [["disabled", "disabled"], ["active", "active (one client's)"]]);
  const reason = select("reason", REASONS, "any reason");
  const client = h("input", { type: "text", name: "clientId", placeholder: "e.g. acme" });
  const lookup = h("input", { type: "text", name: "id", placeholder: "sub_...", class: "wide" });
  const heading = h("h3", { id: "dis-h" }, "Disabled subscriptions");
  const list = h("div", { id: "disabled-list" });
  const detail = h("div", { id: "subscription-detail" });
  const lookupOut = h("div");
  let rows = [];
  let cursor = null;
  let shownStatus = "disabled";
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "Load more");
  const draw = () => {
    const active = shownStatus === "active";
    reason.disabled = active;
    const shown = active ? rows : rows.filter((s) => !reason.value || s.disabledReason === reason.value
      || (reason.value === "*" && !REASONS.some(([r]) => r === s.disabledReason)));
    const columns = [
      ["Subscription", (s) => h("span", { class: "mono" }, s.id)],
      ["Client", (s) => s.clientId],
      ["URL", (s) => h("span", { class: "url" }, s.url)],
      active ? ["Events", (s) => s.eventTypes.join(", ")] : ["Reason", (s) => badge(s.disabledReason || "—")],
      active ? ["Created", (s) => time(s.createdAt)] : ["Disabled", (s) => time(s.disabledAt)],
      ["Failures in a row", (s) => String(s.consecutiveFailures)],
      ["Actions", (s) => [
        h("button", { type: "button", class: "secondary", "aria-label": `Open ${s.id}`, onclick: () => openSubscription(s.id, detail) }, "Open"),
      ]],
    ];
    const empty = active
      ? "This client has no active subscription: its partner creates them (send a portal link from Clients), or enable a disabled one."
      : rows.length
        ? "No disabled subscription matches these filters: clear them to see all."
        : "No subscription is disabled. Every subscription is delivering; when one is disabled (repeated failures, a 410, an operator) it appears here.";
    replace(list, table(active ? "Active subscriptions" : "Disabled subscriptions", columns, shown, empty));
  };
  // The status and client go to the API (active ones are listed per client); the reason
  // filters what was loaded.
  let generation = 0;
  const load = async (fresh) => {
    if (fresh) {
      rows = [];
      cursor = null;
      shownStatus = status.value;
      heading.textContent = shownStatus === "active" ? "Active subscriptions" : "Disabled subscriptions";
      generation += 1;
    }
    const mine = generation;
    const clientId = client.value.trim();
    if (shownStatus === "active" && !clientId) {
      more.hidden = true;
      return replace(list, h("div", { class: "empty", role: "note" },
        "Enter a client id to list its active subscriptions (they are listed per client)."));
    }
    const page = await api.get("/subscriptions", { status: shownStatus, clientId, limit: 100, cursor });
    if (mine !== generation) return; // a newer filter's answer is drawn instead
    rows.push(...page.data);
    cursor = page.nextCursor;
    more.hidden = !page.hasMore;
    draw();
  };
  const reload = () => load(true).catch((err) => replace(list, errorBox(err)));
  more.addEventListener("click", () => load(false).catch((err) => replace(list, errorBox(err))));
  reason.addEventListener("change", draw);
  status.addEventListener("change", reload);
  client.addEventListener("change", reload);
  client.addEventListener("keydown", (ev) => { if (ev.key === "Enter") reload(); });
  frame.show(
    h("h2", null, "Subscriptions"),
    h("section", { "aria-labelledby": "find-h", class: "panel" },
      h("h3", { id: "find-h" }, "Find any subscription"),
      form("inline", [field("Subscription id", lookup), h("button", { type: "submit" }, "Open")],
        async () => openSubscription(lookup.value.trim(), detail), lookupOut), lookupOut),
    h("section", { "aria-labelledby": "dis-h" },
      heading,
      h("div", { class: "row" }, field("Status", status), field("Client", client, "press Enter to apply"),
        field("Reason", reason)),
      list, more),
    detail);
  await reload();
}

/** One subscription's detail, actions and history, drawn in `out`. */
async function openSubscription(id, out) {
  if (!id) throw new Error("Enter a subscription id (sub_...).");
  const s = (await api.get(`/subscriptions/${seg(id)}`)).data;
  const result = h("div", { class: "action-result" });
  const reason = h("input", { type: "text", name: "reason", placeholder: "maintenance" });
  const since = h("input", { type: "datetime-local", name: "replaySince" });
  const history = h("div");
  const redraw = () => openSubscription(id, out);
  const controls = s.status === "disabled"
    ? form("inline", [field("Also replay what failed or was skipped since (optional)", since),
      h("button", { type: "submit", id: "enable-subscription" }, "Enable")], async () => {
      const body = msOf(since) === undefined ? undefined : { replaySince: msOf(since) };
      await api.post(`/subscriptions/${seg(id)}/enable`, body);
      notice(h("div", { class: "success" }, `Enabled ${id}.`));
      return redraw();
    }, result)
    : form("inline", [field("Reason code (optional)", reason, "a-z, 0-9 and _"),
      h("button", { type: "submit", class: "danger", id: "disable-subscription" }, "Disable")], async () => {
      await api.post(`/subscriptions/${seg(id)}/disable`, reason.value ? { reason: reason.value } : undefined);
      notice(h("div", { class: "success" }, `Disabled ${id}.`));
      return redraw();
    }, result);
  replace(out, h("section", { class: "panel", "aria-labelledby": "sub-h", id: "subscription-panel" },
    h("h3", { id: "sub-h" }, "Subscription ", h("span", { class: "mono" }, s.id)),
    props([["Status", badge(s.status)], ["Client", s.clientId], ["URL", h("span", { class: "url sub-url" }, s.url)],
      ["Event types", s.eventTypes.join(", ")], ["Disabled because", s.disabledReason || "—"],
      ["Disabled at", time(s.disabledAt)], ["Created", time(s.createdAt)],
      ["Deliveries failed in a row", String(s.consecutiveFailures)]]),
    controls,
    h("div", { class: "row" },
      action("Send a test delivery", "secondary", async () => testResult((await api.post(`/subscriptions/${seg(id)}/test`)).data), result),
      action("Show its deliveries", "secondary", async () => deliveries({ subscriptionId: id }), result),
      action("Replay a range of it", "secondary", async () => replays({ subscriptionIds: id }), result)),
    result, history));
  out.scrollIntoView({ block: "start" });
}

/** How a test delivery went. */
export function testResult(t) {
  return h("div", { class: t.succeeded ? "success test-result" : "error test-result", role: "status" },
    t.succeeded ? "Test delivery arrived: " : "Test delivery failed: ",
    t.statusCode !== null ? `the receiver answered ${t.statusCode}` : `${t.error} (${t.errorClass})`,
    ` in ${t.durationMs} ms (delivery ${t.id}).`);
}

// ---------------------------------------------------------------------------------------
// Deliveries

function deliveries(preset) {
  nav("Deliveries");
  const inputs = {
    clientId: h("input", { type: "text", name: "clientId", value: preset.clientId || "" }),
    subscriptionId: h("input", { type: "text", name: "subscriptionId", value: preset.subscriptionId || "", placeholder: "sub_..." }),
    status: select("status", DELIVERY_STATUSES, "any status"),
    eventType: select("eventType", EVENT_TYPES, "any event type"),
    since: h("input", { type: "datetime-local", name: "since" }),
    until: h("input", { type: "datetime-local", name: "until" }),
  };
  const out = h("div", { id: "delivery-results" });
  const detail = h("div", { id: "delivery-detail" });
  const rows = [];
  let cursor = null;
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "Load more");
  const params = () => ({
    clientId: inputs.clientId.value.trim(), subscriptionId: inputs.subscriptionId.value.trim(),
    status: inputs.status.value, eventType: inputs.eventType.value,
    since: msOf(inputs.since), until: msOf(inputs.until), limit: 50,
  });
  const draw = () => replace(out, table("Deliveries, oldest first", [
    ["Delivery", (d) => h("span", { class: "mono" }, d.id)],
    ["Event", (d) => d.eventType],
    ["Subscription", (d) => h("span", { class: "mono" }, d.subscriptionId)],
    ["Status", (d) => badge(d.status)],
    ["Created", (d) => time(d.createdAt)],
    ["Attempts", (d) => String(d.attempts.length)],
    ["Replays", (d) => String(d.replays)],
    ["Actions", (d) => h("button", { type: "button", class: "secondary", "aria-label": `Attempts of ${d.id}`, onclick: () => deliveryDetail(d.id, detail).catch((err) => replace(detail, errorBox(err))) }, "Attempts")],
  ], rows, "No delivery matches. Widen the time range or clear a filter; deliveries appear once an event is published to a subscription."));
  let latest = 0;
  const search = async (next) => {
    // Only the latest search draws: an earlier one answering late is dropped.
    const mine = ++latest;
    const page = await api.get("/deliveries", { ...params(), cursor: next ? cursor : null });
    if (mine !== latest) return;
    if (!next) rows.length = 0;
    rows.push(...page.data);
    cursor = page.nextCursor;
    more.hidden = !page.hasMore;
    draw();
  };
  more.addEventListener("click", () => search(true).catch((err) => replace(out, errorBox(err))));
  frame.show(
    h("h2", null, "Deliveries"),
    form("inline", [
      field("Client", inputs.clientId), field("Subscription", inputs.subscriptionId),
      field("Status", inputs.status), field("Event type", inputs.eventType),
      field("Created since", inputs.since), field("Created before", inputs.until),
      h("button", { type: "submit", id: "search-deliveries" }, "Search")], () => search(false), out),
    out, more, detail);
  search(false).catch((err) => replace(out, errorBox(err)));
}

/** A delivery's attempts, with its single replay. */
async function deliveryDetail(id, out) {
  const d = (await api.get(`/deliveries/${seg(id)}`)).data;
  const result = h("div");
  replace(out, h("section", { class: "panel", "aria-labelledby": "dlv-h" },
    h("h3", { id: "dlv-h" }, "Delivery ", h("span", { class: "mono" }, d.id)),
    props([["Status", badge(d.status)], ["Event", `${d.eventType} (${d.eventId})`],
      ["Subscription", h("span", { class: "mono" }, d.subscriptionId)], ["Created", time(d.createdAt)],
      ["Next attempt", time(d.nextAttemptAt)], ["Finished", time(d.finishedAt)], ["Replays", String(d.replays)]]),
    attemptsTable(d.attempts),
    action("Replay this delivery", null, async () => {
      await api.post(`/deliveries/${seg(id)}/replay`);
      await deliveryDetail(id, out);
      return h("div", { class: "success" }, "Replaying: a new run is queued.");
    }, result),
    result));
  out.scrollIntoView({ block: "start" });
}

/** A delivery's attempts, every run. */
export function attemptsTable(attempts) {
  return table("Attempts", [
    ["Run", (a) => (a.run === 0 ? "original" : `replay ${a.run}`)],
    ["Attempt", (a) => String(a.number)],
    ["Sent", (a) => time(a.startedAt)],
    ["Result", (a) => (a.succeeded ? badge("succeeded") : badge("failed"))],
    ["Status code", (a) => (a.statusCode === null ? "—" : String(a.statusCode))],
    ["Error", (a) => (a.error ? `${a.error} (${a.errorClass})` : "—")],
    ["Latency", (a) => `${a.latencyMs} ms`],
  ], attempts, "No attempt yet: the first one runs as soon as the delivery is due.");
}

// ---------------------------------------------------------------------------------------
// Replays

function replays(preset) {
  nav("Replays");
  const since = h("input", { type: "datetime-local", name: "since", required: true, value: localInput(Date.now() - 3600000) });
  const until = h("input", { type: "datetime-local", name: "until" });
  const subs = h("input", { type: "text", name: "subscriptionIds", class: "wide", value: preset.subscriptionIds || "", placeholder: "sub_..., sub_..." });
  const client = h("input", { type: "text", name: "clientId" });
  const jobId = h("input", { type: "text", name: "jobId", placeholder: "rpl_..." });
  const out = h("div", { id: "replay-out" });
  const statuses = h("fieldset", null, h("legend", null, "Delivery statuses to replay"),
    REPLAY_STATUSES.map((s) => check(s, "status", s, s === "failed" || s === "skipped")));
  const types = h("fieldset", null, h("legend", null, "Event types (none: all)"),
    EVENT_TYPES.map((t) => check(t, "eventType", t, false)));
  const read = async (id) => (await api.get(`/replays/${seg(id)}`)).data;
  const cancel = async (id) => (await api.post(`/replays/${seg(id)}/cancel`)).data;
  frame.show(
    h("h2", null, "Replays"),
    h("section", { class: "panel", "aria-labelledby": "rr-h" },
      h("h3", { id: "rr-h" }, "Replay a range"),
      form(null, [
        h("div", { class: "row" }, field("Created since", since), field("Created before (optional)", until)),
        statuses, types,
        h("div", { class: "row" }, field("Subscriptions (comma-separated; empty: all)", subs), field("Client (without subscriptions)", client)),
        h("button", { type: "submit", id: "start-replay" }, "Start the replay")], async (f) => {
        const body = { since: msOf(since), status: checked(f, "status") };
        if (body.since === undefined) throw new Error("Choose the start of the range.");
        if (msOf(until) !== undefined) body.until = msOf(until);
        const eventTypes = checked(f, "eventType");
        if (eventTypes.length) body.eventTypes = eventTypes;
        const ids = subs.value.split(",").map((s) => s.trim()).filter(Boolean);
        if (ids.length) body.subscriptionIds = ids;
        else if (client.value.trim()) body.clientId = client.value.trim();
        const job = (await api.post("/replays", body)).data;
        watchReplay(job, read, cancel, out);
      }, out)),
    h("section", { class: "panel", "aria-labelledby": "rj-h" },
      h("h3", { id: "rj-h" }, "Follow a replay job"),
      form("inline", [field("Replay job id", jobId), h("button", { type: "submit" }, "Follow")],
        async () => { watchReplay(await read(jobId.value.trim()), read, cancel, out); }, out)),
    out);
}

// ---------------------------------------------------------------------------------------
// Clients

function clients(initial) {
  nav("Clients");
  const client = h("input", { type: "text", name: "clientId", value: initial, placeholder: "e.g. acme", pattern: "[A-Za-z0-9_.\\-]{1,64}" });
  const out = h("div", { id: "client-out" });
  frame.show(
    h("h2", null, "Clients and their keys"),
    h("p", { class: "muted" }, "A client is named by its id (1 to 64 letters, digits, _ . -). Open one to see its keys, issue or revoke one, or send its partner a portal link."),
    form("inline", [field("Client id", client), h("button", { type: "submit", id: "open-client" }, "Open")],
      () => clientPanel(client.value.trim(), out), out),
    out);
  if (initial) clientPanel(initial, out).catch((err) => replace(out, errorBox(err)));
}

async function clientPanel(clientId, out) {
  if (!clientId) throw new Error("Enter a client id.");
  const keys = (await api.get(`/clients/${seg(clientId)}/keys`, { limit: 100 })).data;
  const result = h("div", { class: "client-result" });
  const scope = select("scope", [["partner", "partner (read and write)"], ["partner_read", "partner_read (read only)"]]);
  const redraw = () => clientPanel(clientId, out);
  replace(out, h("section", { class: "panel", "aria-labelledby": "cl-h" },
    h("h3", { id: "cl-h" }, "Client ", h("span", { class: "mono" }, clientId)),
    table("API keys", [
      ["Key", (k) => h("span", { class: "mono" }, k.id)],
      ["Scope", (k) => k.scope],
      ["Status", (k) => badge(k.status)],
      ["Issued", (k) => time(k.createdAt)],
      ["Last used", (k) => time(k.lastUsedAt)],
      ["Revoked", (k) => time(k.revokedAt)],
      ["Actions", (k) => (k.status === "active"
        ? action("Revoke", "danger", async () => {
          await api.del(`/clients/${seg(clientId)}/keys/${seg(k.id)}`);
          await redraw();
          notice(h("div", { class: "success" }, `Revoked ${k.id}: its next request is refused.`));
        }, result)
        : "—")],
    ], keys, "This client has no key yet: issue one below, or send its partner a portal link."),
    form("inline", [field("Scope", scope), h("button", { type: "submit", id: "issue-key" }, "Issue a key")], async () => {
      const key = (await api.post(`/clients/${seg(clientId)}/keys`, { scope: scope.value })).data;
      await redraw();
      notice(secretOnce(`API key ${key.id}`, key.apiKey));
    }, result),
    h("div", { class: "row" }, action("Create a partner portal link", "secondary", async () => {
      const link = (await api.post(`/clients/${seg(clientId)}/portal-links`)).data;
      // The API answers a path: the partner reaches the portal where the operator does.
      const url = link.url.startsWith("/") ? window.location.origin + link.url : link.url;
      return h("div", null, secretOnce("Portal link (works once, for 15 minutes)", url),
        h("p", { class: "muted" }, "Expires at ", time(link.expiresAt), ". Send it to the partner over a channel you trust."));
    }, result)),
    result));
}
