// The public REST API, as the portal calls it: the operator's with the admin token as a
// Bearer header (the token lives in sessionStorage, never in a URL), the partner's with the
// session cookie the portal link was exchanged for and its CSRF token on every write.

/** An error answer of the API: its status and the envelope's code, message, details and
 *  request id. */
export class ApiError extends Error {
  constructor(status, body, requestId) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || (status === 0 ? "network_error" : `http_${status}`);
    this.details = e.details || [];
    this.requestId = e.requestId || (body && body.requestId) || requestId || null;
  }
}

/** A query string from an object (undefined, null and "" left out). */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** A path segment, encoded. */
export const seg = (s) => encodeURIComponent(s);

/** One call: JSON in, JSON out; an ApiError for anything but 2xx. */
async function call(method, path, { body, headers } = {}) {
  const init = { method, headers: { Accept: "application/json", ...headers }, credentials: "same-origin", cache: "no-store" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, { error: { code: "network_error", message: `The service did not answer: ${err.message}` } });
  }
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (!res.ok) throw new ApiError(res.status, json, res.headers.get("x-request-id"));
  return json;
}

const ADMIN_KEY = "edgehook.adminToken";

/** The operator API (`/internal/v1/...`) with the admin token. */
export const operator = {
  token: () => sessionStorage.getItem(ADMIN_KEY),
  signIn: (token) => sessionStorage.setItem(ADMIN_KEY, token),
  signOut: () => sessionStorage.removeItem(ADMIN_KEY),
  call(method, path, body) {
    return call(method, `/internal/v1${path}`, { body, headers: { Authorization: `Bearer ${this.token()}` } });
  },
  get(path, params) { return this.call("GET", path + query(params)); },
  post(path, body) { return this.call("POST", path, body); },
  del(path) { return this.call("DELETE", path); },
};

/** The partner API (`/v1/...`) with the session cookie and its CSRF token. */
export const partner = {
  session: null,
  /** Exchanges a one-time portal token for a session (the cookie is set by the answer). */
  async exchange(token) {
    this.session = (await call("POST", "/v1/portal/sessions", { body: { token } })).data;
    return this.session;
  },
  /** The current session (after a reload), or an ApiError 401 without one. */
  async current() {
    this.session = (await call("GET", "/v1/portal/sessions/current")).data;
    return this.session;
  },
  async signOut() {
    await this.call("DELETE", "/portal/sessions/current");
    this.session = null;
  },
  call(method, path, body) {
    const headers = {};
    if (method !== "GET" && method !== "HEAD" && this.session) headers["X-CSRF-Token"] = this.session.csrfToken;
    return call(method, `/v1${path}`, { body, headers });
  },
  get(path, params) { return this.call("GET", path + query(params)); },
  post(path, body) { return this.call("POST", path, body); },
  del(path) { return this.call("DELETE", path); },
};
