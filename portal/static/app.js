// The portal's entry point: decides who is here (a partner following a portal link, a
// partner with a session, an operator signed in, or nobody yet) and starts that view.

import { h, replace, notice } from "./ui.js";
import { operator as opApi, partner as partnerApi } from "./api.js";
import { startOperator } from "./operator.js";
import { startPartner } from "./partner.js";

/** The page's frame: the main area, the header line saying who is signed in, and the
 *  section buttons. Views draw into it through these. */
export const frame = {
  main: () => document.getElementById("main"),
  /** Shows `children` as the page's content and moves focus there (for keyboard and
   *  screen-reader users, as a page load would). */
  show(...children) {
    const main = this.main();
    replace(main, ...children);
    main.focus();
  },
  /** Back to the landing page (after signing out). */
  home: () => landing(),
  who(...children) { replace(document.getElementById("who"), ...children); },
  /** Section buttons: [[label, onSelect]]; `current` is the selected label. */
  nav(sections, current) {
    const nav = document.getElementById("nav");
    replace(nav, sections.map(([label, select]) => {
      const b = h("button", { type: "button", "aria-current": label === current ? "page" : null, "data-section": label }, label);
      b.addEventListener("click", () => { notice(null); select(); });
      return b;
    }));
  },
};

/** The one-time token of a portal link (`#token=...`), taken out of the address bar at once
 *  so that it is in no history entry, bookmark or screenshot after this. */
function takeLinkToken() {
  const m = /^#token=([A-Za-z0-9_.~-]+)$/.exec(window.location.hash);
  if (!window.location.hash.startsWith("#token=")) return null;
  history.replaceState(null, "", window.location.pathname + window.location.search);
  return m ? m[1] : "";
}

/** The landing page: the operator's sign-in, and what a partner should do. */
export function landing() {
  frame.who();
  frame.nav([]);
  frame.show(
    h("h2", null, "Welcome"),
    h("div", { class: "landing" },
      h("section", { class: "panel", "aria-labelledby": "op-h" },
        h("h3", { id: "op-h" }, "Operators"),
        h("p", null, "Sign in with the admin token to manage clients, keys, subscriptions, deliveries and replays."),
        h("button", { type: "button", id: "operator-sign-in", onclick: () => startOperator(frame) }, "Operator sign-in")),
      h("section", { class: "panel", "aria-labelledby": "pa-h" },
        h("h3", { id: "pa-h" }, "Partners"),
        h("p", null, "Open the portal link your operator sent you. A link works once and for 15 minutes; if yours has expired, ask for a new one."))));
}

async function boot() {
  const token = takeLinkToken();
  if (token !== null) return startPartner(frame, token);
  if (opApi.token()) return startOperator(frame);
  try {
    await partnerApi.current();
    return startPartner(frame, null);
  } catch {
    return landing();
  }
}

// A link opened in a tab that already shows the portal changes only the fragment: no load.
window.addEventListener("hashchange", () => {
  const token = takeLinkToken();
  if (token !== null) {
    opApi.signOut();
    startPartner(frame, token);
  }
});

boot();
