// The partner's notification endpoint: where the service tells the partner that one of its
// subscriptions was disabled or enabled again, or that a rotated secret stops signing within
// the hour. Signed like deliveries, with a secret of its own, shown once when it is made.

import { h, replace, field, props, time, form, secretOnce } from "./ui.js";
import { partner as api } from "./api.js";

const PATH = "/notification-endpoint";

/** The notices page in `frame`; `failed(err, out)` shows a failed call (a 401 ends the
 *  session). */
export async function notificationEndpoint(frame, failed) {
  const current = h("div", { id: "notification-endpoint" });
  const out = h("div", { id: "notification-out" });
  const url = h("input", { type: "url", name: "url", required: true, class: "wide", placeholder: "https://ops.example.com/notices" });
  frame.show(
    h("h2", null, "Notices"),
    h("p", null, "We POST a signed notice to this URL when one of your subscriptions is disabled or enabled again, and an hour before a rotated secret stops signing. Verify it as you verify deliveries, with the notification secret."),
    current,
    form(null, [
      field("Notification URL (https)", url),
      h("button", { type: "submit", id: "save-notification-endpoint" }, "Save the notification URL")], async () => {
      const saved = (await api.call("PUT", PATH, { url: url.value.trim() })).data;
      await show(current, url, out, failed);
      return saved.signingSecret
        ? secretOnce("Notification signing secret", saved.signingSecret)
        : h("div", { class: "success" }, "Saved. The notification secret is unchanged.");
    }, out),
    out);
  await show(current, url, out, failed);
}

/** The endpoint as it is (or that there is none), with its removal. */
async function show(current, url, out, failed) {
  let endpoint;
  try {
    endpoint = (await api.get(PATH)).data;
  } catch (err) {
    if (err.status !== 404) return failed(err, current);
    return replace(current, h("p", { class: "muted", id: "no-notification-endpoint" }, "No notification URL yet: no notice is sent."));
  }
  url.value = endpoint.url;
  const remove = h("button", { type: "button", class: "danger", id: "remove-notification-endpoint" }, "Remove");
  remove.addEventListener("click", async () => {
    try {
      await api.del(PATH);
      url.value = "";
      replace(out, h("div", { class: "success" }, "Removed: no more notices."));
      await show(current, url, out, failed);
    } catch (err) {
      failed(err, out);
    }
  });
  replace(current, props([
    ["URL", h("span", { class: "url" }, endpoint.url)],
    ["Notices", endpoint.eventTypes.join(", ")],
    ["Registered", time(endpoint.createdAt)],
    ["Changed", time(endpoint.updatedAt)],
  ]), remove);
}
