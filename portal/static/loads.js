// The partner's own subscriptions changed in place and its loads found: a subscription's URL
// and event types changed (same id, secret and history; deliveries already queued go to the
// new URL), and a search by load id showing each event of that load and every delivery it
// made to the partner's subscriptions, with their attempts.

import { h, replace, field, check, checked, time, badge, form, notice, EVENT_TYPES } from "./ui.js";
import { partner as api, seg } from "./api.js";
import { attemptsTable } from "./operator.js";

/** A panel changing subscription `s`'s URL and event types; `done()` redraws it. */
export function retargetForm(s, done) {
  const url = h("input", { type: "url", name: "url", required: true, class: "wide", value: s.url, id: "retarget-url" });
  const types = h("fieldset", null, h("legend", null, "Event types"),
    EVENT_TYPES.map((t) => check(t, "retargetType", t, s.eventTypes.includes(t))));
  const out = h("div", { id: "retarget-out" });
  return h("details", { class: "panel", id: "retarget" }, h("summary", null, "Change the URL or event types"),
    h("p", { class: "muted" }, "The same subscription, secret and delivery log. Deliveries still waiting for a retry go to the new URL."),
    form(null, [field("Endpoint URL (https)", url), types,
      h("button", { type: "submit", class: "secondary", id: "save-retarget" }, "Save")], async (f) => {
      const body = { url: url.value.trim(), eventTypes: checked(f, "retargetType") };
      await api.call("PATCH", `/webhooks/${seg(s.id)}`, body);
      await done();
      notice(h("div", { class: "success" }, `Changed ${s.id}: it now delivers to ${body.url}.`));
    }, out),
    out);
}

/** The search by load id in `frame`; `failed(err, out)` shows a failed call (a 401 ends
 *  the session). */
export function findLoad(frame, failed) {
  const loadId = h("input", { type: "search", name: "loadId", required: true, id: "load-id", placeholder: "L-123" });
  const out = h("div", { id: "load-events" });
  frame.show(
    h("h2", null, "Find a load"),
    h("p", null, "Every event published for a load within the retention period, newest first, with each delivery to your subscriptions and its attempts."),
    form("inline", [field("Load id", loadId), h("button", { type: "submit", id: "find-load" }, "Find")], async () => {
      try {
        const events = (await api.get("/events", { loadId: loadId.value.trim() })).data;
        return h("div", null, events.length ? events.map(eventPanel)
          : h("div", { class: "empty" }, `No event of load ${loadId.value.trim()} was delivered to your subscriptions within the retention period.`));
      } catch (err) {
        if (err.status === 401) return failed(err, out);
        throw err;
      }
    }, out),
    out);
  loadId.focus();
}

/** One event and its deliveries. */
function eventPanel(e) {
  return h("section", { class: "panel load-event", "data-event": e.id },
    h("h3", null, e.eventType, " · ", time(e.createdAt), " · ", h("span", { class: "mono" }, e.id)),
    e.deliveries.map((d) => h("details", { class: "delivery", "data-delivery": d.id },
      h("summary", null, badge(d.status), " to ", h("span", { class: "mono" }, d.subscriptionId),
        ` · ${d.attempts.length} attempt(s)`),
      attemptsTable(d.attempts))));
}
