// DOM helpers. Every string that reaches the page goes through a text node (h's children)
// or an attribute set with setAttribute: no HTML-string API is used anywhere in the app, so
// nothing a server or a partner provides is ever parsed as markup.

/** An element: `props` are attributes (functions under `on...` become listeners), `children`
 *  nodes or strings (strings become text nodes). */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "value") el.value = String(v);
    else if (k === "checked") el.checked = Boolean(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

/** Appends `children` (nested arrays, nodes, strings; null and false skipped) to `el`. */
export function append(el, children) {
  for (const c of [children].flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Replaces `el`'s content with `children`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

let fieldSeq = 0;

/** A labelled control: `<label class="field"><span>label</span>control</label>`. */
export function field(label, control, hint) {
  const id = control.id || `f${++fieldSeq}`;
  control.id = id;
  return h("div", { class: "field" },
    h("label", { for: id }, h("span", null, label)),
    control,
    hint ? h("small", { class: "muted" }, hint) : null);
}

/** A checkbox with its label. */
export function check(label, name, value, checked) {
  return h("label", { class: "check" },
    h("input", { type: "checkbox", name, value, checked }), label);
}

/** The values of the checked boxes named `name` inside `root`. */
export function checked(root, name) {
  return [...root.querySelectorAll(`input[type=checkbox][name="${name}"]:checked`)].map((i) => i.value);
}

/** A table: `columns` are [heading, cell(row)] pairs; an empty list shows `empty` instead. */
export function table(caption, columns, rows, empty) {
  if (!rows.length) return h("div", { class: "empty", role: "note" }, empty);
  return h("div", { class: "table-wrap" },
    h("table", null,
      h("caption", { class: "muted" }, caption),
      h("thead", null, h("tr", null, columns.map(([name]) => h("th", { scope: "col" }, name)))),
      h("tbody", null, rows.map((row) => h("tr", null, columns.map(([name, cell]) => {
        const content = cell(row);
        const isActions = name === "Actions";
        return h("td", { "data-label": name, class: isActions ? "actions" : null }, content);
      }))))));
}

/** A definition list of [term, value] pairs. */
export function props(pairs) {
  return h("dl", { class: "props" }, pairs.map(([k, v]) => [h("dt", null, k), h("dd", null, v)]));
}

/** A time in ms since the epoch, as local date and time (or "—"). */
export function time(ms) {
  if (ms === null || ms === undefined) return "—";
  const d = new Date(ms);
  return h("time", { datetime: d.toISOString() }, d.toLocaleString());
}

/** The value of a datetime-local input as ms since the epoch, or undefined when empty. */
export function msOf(input) {
  if (!input.value) return undefined;
  const ms = new Date(input.value).getTime();
  return Number.isFinite(ms) ? ms : undefined;
}

/** A datetime-local value for `ms` (local time, minutes). */
export function localInput(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 16);
}

/** A status badge. */
export function badge(text) {
  const kind = { active: "ok", succeeded: "ok", done: "ok", disabled: "bad", failed: "bad",
    pending: "warn", replaying: "warn", selecting: "warn", skipped: "warn" }[text] || "";
  return h("span", { class: `badge ${kind}` }, text);
}

/** An API error (or any error) as the page shows it: the code, the message and the request
 *  id, so an operator can find the request in the logs. */
export function errorBox(err) {
  if (err && err.code) {
    return h("div", { class: "error", role: "alert" },
      h("span", { class: "code" }, err.code), ": ", err.message || "",
      err.details && err.details.length
        ? h("ul", null, err.details.map((d) => h("li", null, `${d.field || ""} (${d.code || ""}): ${d.message || ""}`)))
        : null,
      h("div", { class: "muted" }, "HTTP ", String(err.status), " · requestId ",
        h("span", { class: "mono request-id" }, err.requestId || "none")));
  }
  return h("div", { class: "error", role: "alert" }, String((err && err.message) || err));
}

/** A button that runs `action` and shows its error (or `done`'s result) in `out`. */
export function action(label, cls, action, out) {
  const button = h("button", { type: "button", class: cls || null });
  button.textContent = label;
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const result = await action();
      if (out && result instanceof Node) replace(out, result);
    } catch (err) {
      if (out) replace(out, errorBox(err));
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

/** A form whose submit runs `submit(form)` with errors shown in `out`. */
export function form(cls, children, submit, out) {
  const f = h("form", { class: cls || null, novalidate: true }, children);
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const buttons = [...f.querySelectorAll("button")];
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const result = await submit(f);
      if (out && result instanceof Node) replace(out, result);
    } catch (err) {
      if (out) replace(out, errorBox(err));
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  });
  return f;
}

/** A secret shown once: read-only text, a copy button, and a warning that it will not be
 *  shown again. */
export function secretOnce(label, value) {
  const input = h("input", { type: "text", readonly: true, value, class: "secret-value", "aria-label": label });
  const status = h("span", { class: "muted copy-status", role: "status" });
  const copy = h("button", { type: "button", class: "secondary copy" }, "Copy");
  copy.addEventListener("click", async () => {
    input.select();
    try {
      await navigator.clipboard.writeText(value);
      status.textContent = "Copied to the clipboard.";
    } catch {
      // Without clipboard access (an insecure origin, a denied permission) the text is
      // selected for the user to copy by hand.
      status.textContent = "Selected: press Ctrl+C (or ⌘C) to copy.";
    }
  });
  return h("div", { class: "success secret-once" },
    h("strong", null, label), " — shown this once; store it now.",
    h("div", { class: "secret" }, input, copy, status));
}

/** Shows `node` in the page-wide notice area (cleared with null). */
export function notice(node) {
  replace(document.getElementById("notice"), node);
}

/** The event types the service emits. */
export const EVENT_TYPES = ["load.created", "load.updated", "load.status_changed"];
/** Delivery statuses, as lists filter them. */
export const DELIVERY_STATUSES = ["pending", "succeeded", "failed", "cancelled", "skipped"];
/** Statuses a replay selects. */
export const REPLAY_STATUSES = ["failed", "skipped", "delivered", "cancelled"];

/** A select of `options` ([value, label] or value), with a first "any" option when `any`. */
export function select(name, options, any) {
  return h("select", { name },
    any ? h("option", { value: "" }, any) : null,
    options.map((o) => (Array.isArray(o) ? h("option", { value: o[0] }, o[1]) : h("option", { value: o }, o))));
}

/** Polls a replay job with `read()` until it is done or cancelled, drawing its progress in
 *  `out`; `cancel()` cancels it. Returns when the job has finished. */
export async function watchReplay(job, read, cancel, out) {
  const bar = h("progress", { max: 1, value: 0, "aria-label": "Replay progress" });
  const text = h("p", { class: "replay-state", "aria-live": "polite" });
  const stop = h("button", { type: "button", class: "secondary" }, "Cancel the replay");
  const errors = h("div");
  const draw = (j) => {
    bar.max = Math.max(j.total, 1);
    bar.value = j.state === "done" ? bar.max : j.done;
    text.textContent = `Replay ${j.id}: ${j.state} — ${j.done} of ${j.total} replayed, ${j.failed} failed.`;
    text.dataset.state = j.state;
    stop.hidden = j.state === "done" || j.state === "cancelled";
  };
  stop.addEventListener("click", async () => {
    try { draw(await cancel(job.id)); } catch (err) { replace(errors, errorBox(err)); }
  });
  replace(out, h("div", { class: "panel replay-progress" }, h("h3", null, "Replay progress"), bar, text, stop, errors));
  draw(job);
  out.scrollIntoView({ block: "nearest" });
  while (job.state !== "done" && job.state !== "cancelled") {
    await new Promise((resolve) => { setTimeout(resolve, 1000); });
    if (!out.isConnected) return job;
    try {
      job = await read(job.id);
      draw(job);
    } catch (err) {
      replace(errors, errorBox(err));
    }
  }
  return job;
}
