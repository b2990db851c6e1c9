//! Request routing: path and method to handler, plus the checks every route shares (body
//! limits, authentication, the request id on every response).

use crate::auth::{self, Scope};
use crate::ctx::{Caller, Ctx};
use crate::events;
use crate::{deliveries, keys, notify, operator, options, partner, ping, portal, replays, secrets};
use edgehook_delivery::{RunNow, Sender};
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::http::{Request, Response};
use edgehook_model::ids::request_id;
use edgehook_storage::keys::HEALTH_PROBE;
use edgehook_storage::kv::Kv;

/// Largest body the partner and operator APIs accept.
pub const API_BODY_LIMIT: usize = 64 * 1024;
/// Largest body event ingest accepts (a load).
pub const INGEST_BODY_LIMIT: usize = edgehook_model::events::LOAD_LIMIT;
/// The most the shell reads of any body: anything longer is answered 413 unread.
pub const READ_LIMIT: usize = INGEST_BODY_LIMIT;

/// Who may call a route: which credentials the router checks before its handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No credentials at all (`/healthz`).
    Open,
    /// No credentials but a portal link's token, in the body (the link's exchange).
    Exchange,
    /// A portal session, about itself only (its read and its end).
    Session,
    /// The partner API: a `partner` key, a `partner_read` key for its `GET`s, or a portal
    /// session; counted by the client's rate limit.
    Partner,
    /// Event ingest: the admin token or an `ingest` key; its body is a load.
    Ingest,
    /// The rest of the operator API: the admin token only.
    Operator,
}

/// The type a path parameter is carried as (the handler validates it).
macro_rules! param_type {
    ($param:ident) => {
        String
    };
}

/// The call for the request's method among a route's: the methods but the last are
/// compared in turn, the last is what is left ([`admit`] refused any other before).
macro_rules! by_method {
    ($method:expr; $last:literal => $call:expr) => {
        reply($call)
    };
    ($method:expr; $first:literal => $call:expr, $($rest:tt)+) => {
        if $method == $first {
            reply($call)
        } else {
            by_method!($method; $($rest)+)
        }
    };
}

/// Declares every route once: its variant (with the path parameters it binds), its path
/// as segments (a string is literal, a name binds one segment), who may call it, and per
/// method the handler's call. From this come [`Route`], [`Route::parse`],
/// [`Route::methods`] (so 404, 405 and `Allow`), [`Route::access`] (so the credentials
/// and scopes checked) and `call` (the dispatch). `$cx` names the request's [`Ctx`] and
/// `$client` the caller's client id in the calls.
macro_rules! routes {
    ($cx:ident, $client:ident; $(
        $(#[doc = $doc:literal])+
        $name:ident $(($($param:ident),+))? = [$($seg:tt),+], $access:ident {
            $($method:literal => $call:expr),+ $(,)?
        }
    )+) => {
        /// A recognised path. Path parameters are carried as strings and validated by
        /// handlers.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Route {
            $( $(#[doc = $doc])+ $name $(($(param_type!($param)),+))?, )+
        }

        impl Route {
            /// Resolves a path; `None` is a 404. A trailing slash is not the same path.
            pub fn parse(path: &str) -> Option<Route> {
                let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
                let route = match segments.as_slice() {
                    $( [$($seg),+] => Route::$name $(($((*$param).to_owned()),+))?, )+
                    _ => return None,
                };
                Some(route)
            }

            /// The methods this route answers; anything else is a 405 with `Allow`.
            pub fn methods(&self) -> &'static [&'static str] {
                match self {
                    $( Route::$name { .. } => &[$($method),+], )+
                }
            }

            /// Who may call this route.
            pub fn access(&self) -> Access {
                match self {
                    $( Route::$name { .. } => Access::$access, )+
                }
            }
        }

        /// Runs the route's handler for the request's method (one of
        /// [`Route::methods`]: [`admit`] checked it).
        fn call<K: Kv>($cx: &Ctx<'_, K>, route: Route) -> Result<Reply, ApiError> {
            let $client = $cx.caller.client_id();
            match route {
                $( Route::$name $(($($param),+))? => {
                    by_method!($cx.req.method.as_str(); $($method => $call),+)
                } )+
            }
        }
    };
}

routes! { cx, client;
    /// `/healthz`: liveness plus a store probe.
    Health = ["healthz"], Open {
        "GET" => health(cx),
    }
    /// `/v1/webhooks`: list (GET) and create (POST).
    Webhooks = ["v1", "webhooks"], Partner {
        "GET" => partner::list(cx, client),
        "POST" => partner::create(cx, client),
    }
    /// `/v1/webhooks/{id}`: read (GET), change its delivery options (PATCH) and delete
    /// (DELETE).
    Webhook(id) = ["v1", "webhooks", id], Partner {
        "GET" => partner::get(cx, &id, client),
        "PATCH" => options::update(cx, &id, client),
        "DELETE" => partner::delete(cx, &id, client),
    }
    /// `/v1/webhooks/{id}/enable`: enable a disabled subscription again (POST).
    WebhookEnable(id) = ["v1", "webhooks", id, "enable"], Partner {
        "POST" => partner::enable(cx, &id, client),
    }
    /// `/v1/webhooks/{id}/test`: send a test delivery (`webhook.ping`) now (POST).
    WebhookTest(id) = ["v1", "webhooks", id, "test"], Partner {
        "POST" => ping::partner(cx, &id, client),
    }
    /// `/v1/webhooks/{id}/rotate-secret`: a new signing secret, the old one signing beside it
    /// for an overlap (POST).
    WebhookRotate(id) = ["v1", "webhooks", id, "rotate-secret"], Partner {
        "POST" => options::rotate(cx, &id, client),
    }
    /// `/v1/webhooks/{id}/replays`: start a replay of its deliveries by range (POST).
    WebhookReplays(id) = ["v1", "webhooks", id, "replays"], Partner {
        "POST" => replays::partner_start(cx, &id, client),
    }
    /// `/v1/webhooks/{id}/deliveries`: its deliveries with their attempts, filtered (GET).
    WebhookDeliveries(id) = ["v1", "webhooks", id, "deliveries"], Partner {
        "GET" => deliveries::partner_list(cx, &id, client),
    }
    /// `/v1/webhooks/{id}/deliveries/{delivery}/replay`: replay one finished delivery of
    /// its own, as the operator's replay does (POST).
    WebhookDeliveryReplay(id, dlv) = ["v1", "webhooks", id, "deliveries", dlv, "replay"], Partner {
        "POST" => deliveries::partner_replay(cx, &id, &dlv, client),
    }
    /// `/v1/notification-endpoint`: where the caller's notices go (`subscription.disabled`,
    /// `subscription.enabled`, `secret.rotation_ending`): read (GET), register or change
    /// (PUT), remove (DELETE).
    NotificationEndpoint = ["v1", "notification-endpoint"], Partner {
        "GET" => notify::endpoint(cx, client),
        "PUT" => notify::endpoint(cx, client),
        "DELETE" => notify::endpoint(cx, client),
    }
    /// `/v1/events`: the events of a load id that made deliveries to the caller's
    /// subscriptions (GET `?loadId=`).
    PartnerEvents = ["v1", "events"], Partner {
        "GET" => events::find(cx, Some(client)),
    }
    /// `/v1/events/{eventId}`: an event with its deliveries to the caller's subscriptions.
    PartnerEvent(id) = ["v1", "events", id], Partner {
        "GET" => events::get(cx, &id, Some(client)),
    }
    /// `/v1/replays/{id}`: a replay job of the caller's (GET).
    PartnerReplay(id) = ["v1", "replays", id], Partner {
        "GET" => replays::get(cx, &id, Some(client)),
    }
    /// `/v1/replays/{id}/cancel`: cancel a replay job of the caller's (POST).
    PartnerReplayCancel(id) = ["v1", "replays", id, "cancel"], Partner {
        "POST" => replays::cancel(cx, &id, Some(client)),
    }
    /// `/v1/portal/sessions`: exchange a portal link's token for a session (POST; no
    /// credentials but the token).
    PortalSessions = ["v1", "portal", "sessions"], Exchange {
        "POST" => portal::exchange(cx),
    }
    /// `/v1/portal/sessions/current`: the caller's portal session (GET), or its end
    /// (DELETE); the session cookie only.
    PortalSession = ["v1", "portal", "sessions", "current"], Session {
        "GET" => portal::current(cx),
        "DELETE" => portal::current(cx),
    }
    /// `/internal/v1/clients/{clientId}/portal-links`: mint a one-time portal link
    /// (operator, POST).
    PortalLinks(client_id) = ["internal", "v1", "clients", client_id, "portal-links"], Operator {
        "POST" => portal::mint(cx, &client_id),
    }
    /// `/internal/v1/settings`: the effective settings (operator).
    OperatorSettings = ["internal", "v1", "settings"], Operator {
        "GET" => Ok(operator::settings(cx)),
    }
    /// `/internal/v1/clients/{clientId}/keys`: list (GET) and issue (POST) a client's API
    /// keys (operator).
    ClientKeys(client_id) = ["internal", "v1", "clients", client_id, "keys"], Operator {
        "GET" => keys::list(cx, &client_id),
        "POST" => keys::issue(cx, &client_id),
    }
    /// `/internal/v1/clients/{clientId}/keys/{keyId}`: revoke an API key (operator).
    ClientKey(client_id, key) = ["internal", "v1", "clients", client_id, "keys", key], Operator {
        "DELETE" => keys::revoke(cx, &client_id, &key),
    }
    /// `/internal/v1/ingest-keys`: list (GET) and issue (POST) ingest keys (operator).
    IngestKeys = ["internal", "v1", "ingest-keys"], Operator {
        "GET" => keys::list_ingest(cx),
        "POST" => keys::issue_ingest(cx),
    }
    /// `/internal/v1/ingest-keys/{keyId}`: revoke an ingest key (operator).
    IngestKey(key) = ["internal", "v1", "ingest-keys", key], Operator {
        "DELETE" => keys::revoke_ingest(cx, &key),
    }
    /// `/internal/v1/events`: ingest a load event (operator, or an ingest key; POST), or find
    /// the events of a load id (operator; GET `?loadId=`).
    Events = ["internal", "v1", "events"], Ingest {
        "POST" => operator::ingest(cx),
        "GET" => events::find(cx, None),
    }
    /// `/internal/v1/events/{eventId}`: an event with every delivery it made (operator).
    OperatorEvent(id) = ["internal", "v1", "events", id], Operator {
        "GET" => events::get(cx, &id, None),
    }
    /// `/internal/v1/tick`: run due attempts (operator; for cron-driven hosts).
    Tick = ["internal", "v1", "tick"], Operator {
        "POST" => Ok(operator::tick(cx)),
    }
    /// `/internal/v1/subscriptions`: every client's disabled subscriptions (operator).
    OperatorSubscriptions = ["internal", "v1", "subscriptions"], Operator {
        "GET" => operator::subscriptions_list(cx),
    }
    /// `/internal/v1/subscriptions/{id}`: read any subscription (operator).
    OperatorSubscription(id) = ["internal", "v1", "subscriptions", id], Operator {
        "GET" => operator::subscription(cx, &id),
    }
    /// `/internal/v1/subscriptions/{id}/disable` (operator).
    DisableSubscription(id) = ["internal", "v1", "subscriptions", id, "disable"], Operator {
        "POST" => operator::disable_subscription(cx, &id),
    }
    /// `/internal/v1/subscriptions/{id}/enable` (operator).
    EnableSubscription(id) = ["internal", "v1", "subscriptions", id, "enable"], Operator {
        "POST" => operator::enable_subscription(cx, &id),
    }
    /// `/internal/v1/subscriptions/{id}/rotate-secret`: a new signing secret for any
    /// client's subscription, with the partner's overlap rules (operator, POST).
    OperatorRotate(id) = ["internal", "v1", "subscriptions", id, "rotate-secret"], Operator {
        "POST" => options::operator_rotate(cx, &id),
    }
    /// `/internal/v1/subscriptions/{id}/test`: send a test delivery now (operator).
    TestSubscription(id) = ["internal", "v1", "subscriptions", id, "test"], Operator {
        "POST" => ping::operator(cx, &id),
    }
    /// `/internal/v1/subscriptions/{id}/deliveries`: delivery history (operator).
    SubscriptionDeliveries(id) = ["internal", "v1", "subscriptions", id, "deliveries"], Operator {
        "GET" => deliveries::operator_list(cx, &id),
    }
    /// `/internal/v1/deliveries`: search deliveries across subscriptions (operator, GET).
    Deliveries = ["internal", "v1", "deliveries"], Operator {
        "GET" => deliveries::operator_search(cx),
    }
    /// `/internal/v1/deliveries/{id}`: one delivery with its attempts (operator).
    Delivery(id) = ["internal", "v1", "deliveries", id], Operator {
        "GET" => operator::delivery(cx, &id),
    }
    /// `/internal/v1/deliveries/{id}/replay` (operator).
    Replay(id) = ["internal", "v1", "deliveries", id, "replay"], Operator {
        "POST" => operator::replay(cx, &id),
    }
    /// `/internal/v1/replays`: start a replay by range across subscriptions (operator, POST).
    Replays = ["internal", "v1", "replays"], Operator {
        "POST" => replays::operator_start(cx),
    }
    /// `/internal/v1/replays/{id}`: any replay job (operator, GET).
    OperatorReplay(id) = ["internal", "v1", "replays", id], Operator {
        "GET" => replays::get(cx, &id, None),
    }
    /// `/internal/v1/replays/{id}/cancel`: cancel any replay job (operator, POST).
    OperatorReplayCancel(id) = ["internal", "v1", "replays", id, "cancel"], Operator {
        "POST" => replays::cancel(cx, &id, None),
    }
    /// `/internal/v1/secrets/reseal`: seal a batch of stored secrets under the current key
    /// (operator, POST).
    Reseal = ["internal", "v1", "secrets", "reseal"], Operator {
        "POST" => secrets::reseal(cx),
    }
}

/// A handler's answer as a [`Reply`]: one copy per kind of answer, not one per route.
#[inline(never)]
fn reply<T: Into<Reply>>(answer: Result<T, ApiError>) -> Result<Reply, ApiError> {
    answer.map(Into::into)
}

impl Route {
    /// Whether the route belongs to the operator API (admin token, not API keys).
    pub fn is_operator(&self) -> bool {
        matches!(self.access(), Access::Ingest | Access::Operator)
    }

    /// Whether an API key of `scope` may call this route with `method` (the router asks
    /// once the key is authenticated; `/healthz` takes no credentials at all): a `partner`
    /// key every partner route, a `partner_read` key their `GET`s only, an `ingest` key event
    /// ingest only. No key may call another operator route: those take the admin token. A
    /// portal session may do what a `partner` key may, and read or end itself; a portal
    /// link nothing (it is only exchanged).
    pub fn allows(&self, scope: Scope, method: &str) -> bool {
        let access = self.access();
        let partner = matches!(access, Access::Open | Access::Exchange | Access::Partner);
        match scope {
            Scope::Partner => partner,
            Scope::PartnerRead => partner && method == "GET",
            Scope::Ingest => access == Access::Ingest && method == "POST",
            Scope::PortalSession => partner || access == Access::Session,
            Scope::PortalLink => false,
        }
    }

    /// The body size limit of this route and `method`: a load's on event ingest (its
    /// `POST`), the API's on anything else.
    pub fn body_limit(&self, method: &str) -> usize {
        match (self.access(), method) {
            (Access::Ingest, "POST") => INGEST_BODY_LIMIT,
            _ => API_BODY_LIMIT,
        }
    }
}

/// What a handler answers: the response, and the deliveries to run once it is out.
struct Reply {
    response: Response,
    run_after: Option<RunNow>,
}

impl From<Response> for Reply {
    fn from(response: Response) -> Self {
        Reply {
            response,
            run_after: None,
        }
    }
}

impl From<(Response, RunNow)> for Reply {
    fn from((response, run): (Response, RunNow)) -> Self {
        Reply {
            response,
            run_after: Some(run),
        }
    }
}

/// The result of one request: the response, and an internal note for the log when the
/// request failed for a reason the client must not see.
#[derive(Debug)]
pub struct Handled {
    /// The response to send.
    pub response: Response,
    /// The request id given to this request (also in the body and `X-Request-Id`).
    pub request_id: String,
    /// Internal cause of a failure, for the log.
    pub log: Option<String>,
    /// Deliveries to run now that the response is out (an event was accepted or a
    /// delivery replayed: their attempt is due at once); see [`edgehook_delivery::run_now`].
    /// The caller runs it in the same invocation: a new key-less event's first batch is
    /// leased to this run, and waits for the lease to end if it never comes.
    pub run_after: Option<RunNow>,
}

/// Handles one HTTP request. Never panics on request data: every failure becomes the JSON
/// error envelope.
pub fn handle<K: Kv>(env: &Env<'_, K>, req: &Request, sender: &dyn Sender) -> Handled {
    let request_id = request_id(env.entropy);
    let (response, log, run_after) = match dispatch(env, req, &request_id, sender) {
        Ok(reply) => (reply.response, None, reply.run_after),
        Err(err) => {
            if err.status == 401 {
                crate::limits::count_auth_failure(env, req);
            }
            let log = err.log.clone();
            (err.into_response(&request_id), log, None)
        }
    };
    Handled {
        response: response.with_header("x-request-id", request_id.clone()),
        request_id,
        log,
        run_after,
    }
}

/// The response for a request that arrived while the settings could not be parsed.
pub fn misconfigured(request_id: &str, problem: &str) -> Handled {
    let err = ApiError::internal(format!("invalid configuration: {problem}"));
    let log = err.log.clone();
    Handled {
        response: err
            .into_response(request_id)
            .with_header("x-request-id", request_id),
        request_id: request_id.to_owned(),
        log,
        run_after: None,
    }
}

fn dispatch<K: Kv>(
    env: &Env<'_, K>,
    req: &Request,
    request_id: &str,
    sender: &dyn Sender,
) -> Result<Reply, ApiError> {
    let route = Route::parse(&req.path).ok_or_else(|| ApiError::not_found("Route"))?;
    admit(&route, req)?;
    let mut cx = Ctx::new(env, req, request_id, sender);
    authorize(&mut cx, &route)?;
    call(&cx, route)
}

/// The checks before any credentials: the method (405 with `Allow`) and the body's size
/// (413).
fn admit(route: &Route, req: &Request) -> Result<(), ApiError> {
    if !route.methods().contains(&req.method.as_str()) {
        return Err(ApiError::method_not_allowed(route.methods()));
    }
    let limit = route.body_limit(&req.method);
    if req.body_truncated || req.body.len() > limit {
        return Err(ApiError::payload_too_large(limit));
    }
    Ok(())
}

/// Checks the credentials the route's [`Access`] takes (after the client address's
/// failed attempts, but for `/healthz`), and says in `cx` who is calling. A key must have
/// a scope that [`Route::allows`] the request (else 403); a partner route counts the
/// request against its client's rate limit.
fn authorize<K: Kv>(cx: &mut Ctx<'_, K>, route: &Route) -> Result<(), ApiError> {
    let (env, req) = (cx.env, cx.req);
    let access = route.access();
    if access == Access::Open {
        return Ok(());
    }
    crate::limits::check_auth_failures(env, req)?;
    match access {
        Access::Open | Access::Exchange => {}
        Access::Ingest | Access::Operator => {
            authorize_operator(env, req, route)?;
            cx.caller = Caller::Operator;
        }
        Access::Session | Access::Partner => {
            let key = auth::authenticate(env, req)?;
            if !route.allows(key.scope, &req.method) {
                return Err(ApiError::forbidden());
            }
            if access == Access::Partner {
                crate::limits::count_request(env, &key.client_id)?;
            }
            cx.caller = Caller::Key(key);
        }
    }
    Ok(())
}

/// Admits a request to an operator route: the admin token always; an API key (`ehk_...`)
/// when its scope allows the route (an ingest key on event ingest), else 403 (a key the
/// service knows, without the right); anything else, or an unknown or revoked key, the
/// operator API's 401.
fn authorize_operator<K: Kv>(
    env: &Env<'_, K>,
    req: &Request,
    route: &Route,
) -> Result<(), ApiError> {
    let Err(refused) = operator::authorize(env, req) else {
        return Ok(());
    };
    if !auth::bearer(req).is_some_and(|t| t.starts_with(auth::KEY_PREFIX)) {
        return Err(refused);
    }
    let key =
        auth::authenticate(env, req).map_err(|e| if e.status == 401 { refused } else { e })?;
    if route.allows(key.scope, &req.method) {
        Ok(())
    } else {
        Err(ApiError::forbidden())
    }
}

/// `GET /healthz`: 200 when the store answers, 503 `store_unavailable` when it does not.
/// Reports the component's view of the time, which makes the clock seam observable.
fn health<K: Kv>(cx: &Ctx<'_, K>) -> Result<Response, ApiError> {
    /// The body (keys sorted, as the envelope's).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Health<'a> {
        request_id: &'a str,
        server_time_ms: u64,
        status: &'static str,
    }
    cx.env.kv.get(&HEALTH_PROBE)?;
    Ok(Response::json(
        200,
        &Health {
            request_id: cx.request_id,
            server_time_ms: cx.env.now_ms,
            status: "ok",
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgehook_model::config::Settings;
    use edgehook_model::env::SeededEntropy;
    use edgehook_storage::kv::MemoryKv;

    fn run(kv: &MemoryKv, req: Request) -> Handled {
        let settings = Settings::default();
        let entropy = SeededEntropy::new(7);
        let env = Env::new(1_700_000_000_000, kv, &settings, &entropy);
        handle(&env, &req, &edgehook_delivery::NoNetwork)
    }

    #[test]
    fn health_reports_ok_and_time() {
        let h = run(&MemoryKv::new(), Request::new("GET", "/healthz"));
        assert_eq!(h.response.status, 200);
        let body = h.response.json_body();
        assert_eq!(body["status"], "ok");
        assert_eq!(body["serverTimeMs"], 1_700_000_000_000u64);
        assert_eq!(body["requestId"], h.request_id.as_str());
        assert_eq!(
            h.response.header("x-request-id"),
            Some(h.request_id.as_str())
        );
    }

    #[test]
    fn unknown_route_is_a_404_envelope() {
        let h = run(&MemoryKv::new(), Request::new("GET", "/nope"));
        assert_eq!(h.response.status, 404);
        assert_eq!(h.response.json_body()["error"]["code"], "not_found");
        assert!(h.response.header("x-request-id").is_some());
    }

    #[test]
    fn wrong_method_is_a_405_with_allow() {
        let h = run(&MemoryKv::new(), Request::new("DELETE", "/healthz"));
        assert_eq!(h.response.status, 405);
        assert_eq!(h.response.header("allow"), Some("GET"));
    }

    #[test]
    fn store_failure_is_a_503_envelope() {
        let kv = MemoryKv::new();
        kv.fail_at(Some(1));
        let h = run(&kv, Request::new("GET", "/healthz"));
        assert_eq!(h.response.status, 503);
        assert_eq!(h.response.json_body()["error"]["code"], "store_unavailable");
        assert!(h.log.is_some());
    }

    #[test]
    fn oversized_body_is_a_413() {
        let mut req = Request::new("GET", "/healthz");
        req.body_truncated = true;
        let h = run(&MemoryKv::new(), req);
        assert_eq!(h.response.status, 413);
    }

    /// What each scope may call. Every route and method the router serves,
    /// through `Route::parse` and `methods`, so a new route is decided here too.
    #[test]
    fn each_scope_allows_exactly_its_routes() {
        let paths = [
            "/v1/webhooks",
            "/v1/webhooks/sub_0123456789abcdef01234567",
            "/v1/webhooks/sub_0123456789abcdef01234567/enable",
            "/v1/webhooks/sub_0123456789abcdef01234567/test",
            "/internal/v1/settings",
            "/internal/v1/clients/acme/keys",
            "/internal/v1/clients/acme/keys/key_0123456789abcdef01234567",
            "/internal/v1/ingest-keys",
            "/internal/v1/ingest-keys/key_0123456789abcdef01234567",
            "/internal/v1/events",
            "/internal/v1/events/evt_0123456789abcdef01234567",
            "/v1/events",
            "/v1/events/evt_0123456789abcdef01234567",
            "/internal/v1/tick",
            "/internal/v1/subscriptions",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/disable",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/enable",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/test",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/rotate-secret",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/deliveries",
            "/internal/v1/deliveries/dlv_0123456789abcdef01234567",
            "/internal/v1/deliveries/dlv_0123456789abcdef01234567/replay",
            "/internal/v1/clients/acme/portal-links",
            "/internal/v1/secrets/reseal",
            "/v1/portal/sessions",
            "/v1/portal/sessions/current",
        ];
        for path in paths {
            let route = Route::parse(path).expect(path);
            for &method in route.methods() {
                let partner_api = path.starts_with("/v1/");
                // A key reads and ends no portal session; a session is a partner's key.
                let partner = partner_api && path != "/v1/portal/sessions/current";
                assert_eq!(
                    route.allows(Scope::PortalSession, method),
                    partner_api,
                    "{method} {path}"
                );
                assert!(!route.allows(Scope::PortalLink, method), "{method} {path}");
                assert_eq!(
                    route.allows(Scope::Partner, method),
                    partner,
                    "{method} {path}"
                );
                assert_eq!(
                    route.allows(Scope::PartnerRead, method),
                    partner && method == "GET",
                    "{method} {path}"
                );
                assert_eq!(
                    route.allows(Scope::Ingest, method),
                    path == "/internal/v1/events" && method == "POST",
                    "{method} {path}"
                );
            }
        }
    }

    fn issued(kv: &MemoryKv, client: &str, scope: Scope, seed: u64) -> String {
        let settings = Settings::default();
        let entropy = SeededEntropy::new(seed);
        let env = Env::new(1_700_000_000_000, kv, &settings, &entropy);
        let client = edgehook_model::ids::ClientId::from(client);
        auth::issue(&env, &client, scope).expect("issued").1
    }

    fn with(req: Request, token: &str) -> Request {
        req.header("authorization", &format!("Bearer {token}"))
    }

    /// A key the scope does not allow is a 403 `forbidden` (a write with a read-only key,
    /// an ingest key on the partner API, a partner key on the operator API), before the
    /// handler or the rate limit runs; unknown credentials stay 401; the admin token is
    /// still no API key on the partner API.
    #[test]
    fn a_scope_that_does_not_allow_the_request_is_a_403_and_writes_nothing() {
        let kv = MemoryKv::new();
        let read = issued(&kv, "acme", Scope::PartnerRead, 1);
        let ingest = issued(&kv, "", Scope::Ingest, 2);
        let partner = issued(&kv, "acme", Scope::Partner, 3);
        let body = r#"{"url":"https://hooks.example.com/x","eventTypes":["load.created"]}"#;
        let create = || {
            Request::new("POST", "/v1/webhooks")
                .header("content-type", "application/json")
                .body(body)
        };
        let status = |req: Request| {
            let h = run(&kv, req);
            (
                h.response.status,
                h.response.json_body()["error"]["code"].clone(),
            )
        };
        let forbidden = (403, serde_json::json!("forbidden"));
        let before = kv.dump().len();
        assert_eq!(status(with(create(), &read)), forbidden);
        assert_eq!(status(with(create(), &ingest)), forbidden);
        assert_eq!(
            status(with(Request::new("GET", "/v1/webhooks"), &ingest)),
            forbidden
        );
        assert_eq!(
            status(with(Request::new("GET", "/internal/v1/settings"), &partner)),
            forbidden
        );
        assert_eq!(
            status(with(Request::new("POST", "/internal/v1/tick"), &ingest)),
            forbidden
        );
        assert_eq!(
            status(with(Request::new("POST", "/internal/v1/events"), &read)),
            forbidden
        );
        // Only `lastUsedAt` changed (one write per key, in place): no subscription, no rate
        // counter.
        assert_eq!(kv.dump().len(), before);
        assert_eq!(
            status(with(Request::new("GET", "/v1/webhooks"), &read)).0,
            200
        );
        assert_eq!(status(with(create(), &partner)).0, 201);
        // An ingest key reaches event ingest's own checks (here: no content type, 415).
        assert_eq!(
            status(with(Request::new("POST", "/internal/v1/events"), &ingest)).0,
            415
        );
        let unknown = "ehk_unknown";
        assert_eq!(
            status(with(Request::new("POST", "/internal/v1/events"), unknown)).0,
            401
        );
        assert_eq!(
            status(with(Request::new("GET", "/v1/webhooks"), unknown)).0,
            401
        );
    }
}
