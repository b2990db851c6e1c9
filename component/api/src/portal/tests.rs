//! Portal links and sessions through the router: minted by the operator, exchanged once,
//! a cookie with its CSRF token, ended by the partner or the operator, and expiring.

use super::*;
use crate::auth::{LINK_TTL_MS, SESSION_TTL_MS};
use crate::router::{Handled, handle};
use edgehook_model::config::Settings;
use edgehook_model::env::{Env, SeededEntropy};
use edgehook_model::http::Request;
use edgehook_storage::kv::MemoryKv;

const T0: u64 = 1_767_225_600_000;

struct Portal {
    kv: MemoryKv,
    settings: Settings,
    /// Each call's entropy seed: a new one per call, so no two tokens are alike.
    seed: std::cell::Cell<u64>,
}

impl Portal {
    fn new() -> Portal {
        Portal {
            kv: MemoryKv::new(),
            settings: Settings::from_pairs([("admin_token", "admin")]).expect("settings"),
            seed: std::cell::Cell::new(1),
        }
    }

    fn call(&self, at: u64, req: Request) -> Handled {
        self.seed.set(self.seed.get() + 1);
        let entropy = SeededEntropy::new(self.seed.get());
        let env = Env::new(at, &self.kv, &self.settings, &entropy);
        handle(&env, &req, &edgehook_delivery::NoNetwork)
    }

    /// Mints a link for acme at `at`; returns its token.
    fn mint(&self, at: u64) -> String {
        let h = self.call(
            at,
            Request::new("POST", "/internal/v1/clients/acme/portal-links")
                .header("authorization", "Bearer admin"),
        );
        assert_eq!(h.response.status, 201, "{:?}", h.response.json_body());
        let data = &h.response.json_body()["data"];
        let token = data["token"].as_str().expect("token").to_owned();
        assert_eq!(data["url"], format!("/portal/#token={token}"));
        assert_eq!(data["expiresAt"], at + LINK_TTL_MS);
        assert_eq!(data["clientId"], "acme");
        token
    }

    fn exchange(&self, at: u64, token: &str, tls: bool) -> Handled {
        let mut req = Request::new("POST", "/v1/portal/sessions")
            .header("content-type", "application/json")
            .body(format!(r#"{{"token":"{token}"}}"#));
        req.tls = tls;
        self.call(at, req)
    }

    /// A session for acme: (cookie value, CSRF token).
    fn session(&self, at: u64) -> (String, String) {
        let link = self.mint(at);
        let h = self.exchange(at, &link, false);
        assert_eq!(h.response.status, 201, "{:?}", h.response.json_body());
        let cookie = h.response.header("set-cookie").expect("cookie");
        let value = cookie
            .strip_prefix("edgehook_session=")
            .and_then(|c| c.split(';').next())
            .expect("the session")
            .to_owned();
        let csrf = h.response.json_body()["data"]["csrfToken"]
            .as_str()
            .expect("csrf")
            .to_owned();
        (value, csrf)
    }
}

fn create(cookie: &str, csrf: Option<&str>) -> Request {
    let mut req = Request::new("POST", "/v1/webhooks")
        .header("content-type", "application/json")
        .header("cookie", &format!("theme=dark; edgehook_session={cookie}"))
        .body(r#"{"url":"https://hooks.example.com/x","eventTypes":["load.created"]}"#);
    if let Some(csrf) = csrf {
        req = req.header("x-csrf-token", csrf);
    }
    req
}

fn list(cookie: &str) -> Request {
    Request::new("GET", "/v1/webhooks").header("cookie", &format!("edgehook_session={cookie}"))
}

fn code(h: &Handled) -> (u16, String) {
    let body = h.response.json_body();
    (
        h.response.status,
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// The link's token buys one session, whose cookie is HttpOnly,
/// SameSite=Strict, for the whole site, 12 hours, and Secure only under TLS; the session
/// then reads the partner API like a key of its client, and writes only with its CSRF token.
#[test]
fn a_link_buys_one_session_whose_cookie_writes_only_with_its_csrf_token() {
    let p = Portal::new();
    let link = p.mint(T0);
    let h = p.exchange(T0 + 1_000, &link, false);
    assert_eq!(h.response.status, 201);
    let cookie = h.response.header("set-cookie").expect("cookie");
    assert!(
        cookie.ends_with("; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200"),
        "{cookie}"
    );
    let data = &h.response.json_body()["data"];
    assert_eq!(data["clientId"], "acme");
    assert_eq!(data["expiresAt"], T0 + 1_000 + SESSION_TTL_MS);
    assert_eq!(
        code(&p.exchange(T0 + 2_000, &link, false)),
        (401, "unauthorized".into()),
        "a link is used once"
    );
    let (session, csrf) = p.session(T0);
    assert_eq!(p.call(T0, list(&session)).response.status, 200);
    assert_eq!(
        code(&p.call(T0, create(&session, None))),
        (403, "csrf_failed".into())
    );
    assert_eq!(
        code(&p.call(T0, create(&session, Some(&"0".repeat(64))))),
        (403, "csrf_failed".into())
    );
    let made = p.call(T0, create(&session, Some(&csrf)));
    assert_eq!(made.response.status, 201, "{:?}", made.response.json_body());
    // Under TLS the cookie is Secure too.
    let link = p.mint(T0);
    let h = p.exchange(T0, &link, true);
    assert!(
        h.response
            .header("set-cookie")
            .expect("cookie")
            .ends_with("; Secure")
    );
}

/// A session is presented only as the cookie, a key only as a bearer token, and a link's
/// token authenticates nothing but its exchange.
#[test]
fn sessions_keys_and_links_each_authenticate_only_their_own_way() {
    let p = Portal::new();
    let (session, _) = p.session(T0);
    let bearer = |token: &str| {
        Request::new("GET", "/v1/webhooks").header("authorization", &format!("Bearer {token}"))
    };
    assert_eq!(
        code(&p.call(T0, bearer(&session))).0,
        401,
        "session as a key"
    );
    let link = p.mint(T0);
    assert_eq!(code(&p.call(T0, bearer(&link))).0, 401, "link as a key");
    assert_eq!(code(&p.call(T0, list(&link))).0, 401, "link as a cookie");
    let settings = Settings::default();
    let entropy = SeededEntropy::new(3);
    let env = Env::new(T0, &p.kv, &settings, &entropy);
    let (_, key) = auth::issue(&env, &ClientId::from("acme"), Scope::Partner).expect("key");
    assert_eq!(code(&p.call(T0, list(&key))).0, 401, "key as a cookie");
    let read = p.call(
        T0,
        bearer(&key).header("x-ignored", "1"), // a key reads the partner API as before
    );
    assert_eq!(read.response.status, 200);
    let mut own = bearer(&key);
    own.path = "/v1/portal/sessions/current".into();
    assert_eq!(code(&p.call(T0, own)), (403, "forbidden".into()));
    // The link still works after being tried as a credential.
    assert_eq!(p.exchange(T0, &link, false).response.status, 201);
}

/// A link is good for 15 minutes and a session for 12 hours from its issue; the session's
/// read gives its CSRF token back (a reloaded page); its end (CSRF-checked) clears the
/// cookie and the session stops working; the operator sees sessions and links among the
/// client's keys and can end one by revoking it.
#[test]
fn links_and_sessions_expire_and_end() {
    let p = Portal::new();
    let link = p.mint(T0);
    assert_eq!(
        code(&p.exchange(T0 + LINK_TTL_MS, &link, false)),
        (401, "unauthorized".into())
    );
    assert_eq!(
        p.exchange(T0 + LINK_TTL_MS - 1, &link, false)
            .response
            .status,
        201
    );
    let (session, csrf) = p.session(T0);
    let later = T0 + SESSION_TTL_MS - 1;
    let current = |at: u64| {
        p.call(
            at,
            Request::new("GET", "/v1/portal/sessions/current")
                .header("cookie", &format!("edgehook_session={session}")),
        )
    };
    let h = current(later);
    assert_eq!(h.response.status, 200);
    assert_eq!(h.response.json_body()["data"]["csrfToken"], csrf.as_str());
    assert_eq!(p.call(later, list(&session)).response.status, 200);
    assert_eq!(code(&p.call(T0 + SESSION_TTL_MS, list(&session))).0, 401);
    // Ending it: CSRF-checked, then 204 with the cookie cleared.
    let (session, csrf) = p.session(T0);
    let end = |csrf: Option<&str>| {
        let mut req = Request::new("DELETE", "/v1/portal/sessions/current")
            .header("cookie", &format!("edgehook_session={session}"));
        if let Some(csrf) = csrf {
            req = req.header("x-csrf-token", csrf);
        }
        p.call(T0, req)
    };
    assert_eq!(code(&end(None)), (403, "csrf_failed".into()));
    let h = end(Some(&csrf));
    assert_eq!(h.response.status, 204);
    assert!(
        h.response
            .header("set-cookie")
            .is_some_and(|c| c.starts_with("edgehook_session=;") && c.ends_with("Max-Age=0"))
    );
    assert_eq!(code(&p.call(T0, list(&session))).0, 401);
    // The operator's list of acme's keys shows each link and session with its scope.
    let keys = p.call(
        T0,
        Request::new("GET", "/internal/v1/clients/acme/keys?limit=100")
            .header("authorization", "Bearer admin"),
    );
    let body = keys.response.json_body();
    let scopes: Vec<&str> = body["data"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["scope"].as_str().expect("scope"))
        .collect();
    assert!(scopes.contains(&"portal_link") && scopes.contains(&"portal_session"));
}

#[test]
fn the_session_cookie_is_found_among_others_and_only_by_its_name() {
    let req = |v: &str| Request::new("GET", "/").header("cookie", v);
    assert_eq!(
        session_cookie(&req("a=1; edgehook_session=abc; b=2")),
        Some("abc")
    );
    assert_eq!(session_cookie(&req("edgehook_session=")), None);
    assert_eq!(session_cookie(&req("xedgehook_session=abc")), None);
    assert_eq!(session_cookie(&Request::new("GET", "/")), None);
    let two = Request::new("GET", "/")
        .header("cookie", "a=1")
        .header("cookie", "edgehook_session=def");
    assert_eq!(session_cookie(&two), Some("def"));
}
