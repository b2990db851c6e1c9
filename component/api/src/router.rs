//! Request routing: path and method to handler, plus the checks every route shares (body
//! limits, authentication, the request id on every response).

use crate::auth::{self, Scope};
use crate::{deliveries, keys, operator, options, partner, ping, portal, replays};
use edgehook_delivery::{RunNow, Sender};
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::http::{Request, Response};
use edgehook_model::ids::IdKind;
use edgehook_storage::keys::HEALTH_PROBE;
use edgehook_storage::kv::Kv;

/// Largest body the partner and operator APIs accept.
pub const API_BODY_LIMIT: usize = 64 * 1024;
/// Largest body event ingest accepts (a load).
pub const INGEST_BODY_LIMIT: usize = edgehook_model::events::LOAD_LIMIT;
/// The most the shell reads of any body: anything longer is answered 413 unread.
pub const READ_LIMIT: usize = INGEST_BODY_LIMIT;

/// A recognised path. Path parameters are carried as strings and validated by handlers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/healthz`: liveness plus a store probe.
    Health,
    /// `/v1/webhooks`: list (GET) and create (POST).
    Webhooks,
    /// `/v1/webhooks/{id}`: read (GET) and delete (DELETE).
    Webhook(String),
    /// `/v1/webhooks/{id}/enable`: enable a disabled subscription again (POST).
    WebhookEnable(String),
    /// `/v1/webhooks/{id}/test`: send a test delivery (`webhook.ping`) now (POST).
    WebhookTest(String),
    /// `/v1/webhooks/{id}/rotate-secret`: a new signing secret, the old one signing beside it
    /// for an overlap (POST).
    WebhookRotate(String),
    /// `/v1/webhooks/{id}/deliveries`: its deliveries with their attempts, filtered (GET).
    WebhookDeliveries(String),
    /// `/v1/webhooks/{id}/deliveries/{delivery}/replay`: replay one finished delivery of
    /// its own, as the operator's replay does (POST).
    WebhookDeliveryReplay(String, String),
    /// `/v1/webhooks/{id}/replays`: start a replay of its deliveries by range (POST).
    WebhookReplays(String),
    /// `/v1/replays/{id}`: a replay job of the caller's (GET).
    PartnerReplay(String),
    /// `/v1/replays/{id}/cancel`: cancel a replay job of the caller's (POST).
    PartnerReplayCancel(String),
    /// `/v1/portal/sessions`: exchange a portal link's token for a session (POST; no
    /// credentials but the token).
    PortalSessions,
    /// `/v1/portal/sessions/current`: the caller's portal session (GET), or its end
    /// (DELETE); the session cookie only.
    PortalSession,
    /// `/internal/v1/clients/{clientId}/portal-links`: mint a one-time portal link
    /// (operator, POST).
    PortalLinks(String),
    /// `/internal/v1/settings`: the effective settings (operator).
    OperatorSettings,
    /// `/internal/v1/clients/{clientId}/keys`: list (GET) and issue (POST) a client's API
    /// keys (operator).
    ClientKeys(String),
    /// `/internal/v1/clients/{clientId}/keys/{keyId}`: revoke an API key (operator).
    ClientKey(String, String),
    /// `/internal/v1/ingest-keys`: list (GET) and issue (POST) ingest keys (operator).
    IngestKeys,
    /// `/internal/v1/ingest-keys/{keyId}`: revoke an ingest key (operator).
    IngestKey(String),
    /// `/internal/v1/events`: ingest a load event (operator).
    Events,
    /// `/internal/v1/tick`: run due attempts (operator; for cron-driven hosts).
    Tick,
    /// `/internal/v1/subscriptions`: every client's disabled subscriptions (operator).
    OperatorSubscriptions,
    /// `/internal/v1/subscriptions/{id}`: read any subscription (operator).
    OperatorSubscription(String),
    /// `/internal/v1/subscriptions/{id}/disable` (operator).
    DisableSubscription(String),
    /// `/internal/v1/subscriptions/{id}/enable` (operator).
    EnableSubscription(String),
    /// `/internal/v1/subscriptions/{id}/test`: send a test delivery now (operator).
    TestSubscription(String),
    /// `/internal/v1/subscriptions/{id}/deliveries`: delivery history (operator).
    SubscriptionDeliveries(String),
    /// `/internal/v1/deliveries`: search deliveries across subscriptions (operator, GET).
    Deliveries,
    /// `/internal/v1/deliveries/{id}`: one delivery with its attempts (operator).
    Delivery(String),
    /// `/internal/v1/deliveries/{id}/replay` (operator).
    Replay(String),
    /// `/internal/v1/replays`: start a replay by range across subscriptions (operator, POST).
    Replays,
    /// `/internal/v1/replays/{id}`: any replay job (operator, GET).
    OperatorReplay(String),
    /// `/internal/v1/replays/{id}/cancel`: cancel any replay job (operator, POST).
    OperatorReplayCancel(String),
}

impl Route {
    /// Resolves a path; `None` is a 404. A trailing slash is not the same path.
    pub fn parse(path: &str) -> Option<Route> {
        let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
        let route = match segments.as_slice() {
            ["healthz"] => Route::Health,
            ["v1", "webhooks"] => Route::Webhooks,
            ["v1", "webhooks", id] => Route::Webhook((*id).to_owned()),
            ["v1", "webhooks", id, "enable"] => Route::WebhookEnable((*id).to_owned()),
            ["v1", "webhooks", id, "test"] => Route::WebhookTest((*id).to_owned()),
            ["v1", "webhooks", id, "rotate-secret"] => Route::WebhookRotate((*id).to_owned()),
            ["v1", "webhooks", id, "replays"] => Route::WebhookReplays((*id).to_owned()),
            ["v1", "webhooks", id, "deliveries"] => Route::WebhookDeliveries((*id).to_owned()),
            ["v1", "webhooks", id, "deliveries", dlv, "replay"] => {
                Route::WebhookDeliveryReplay((*id).to_owned(), (*dlv).to_owned())
            }
            ["v1", "replays", id] => Route::PartnerReplay((*id).to_owned()),
            ["v1", "replays", id, "cancel"] => Route::PartnerReplayCancel((*id).to_owned()),
            ["v1", "portal", "sessions"] => Route::PortalSessions,
            ["v1", "portal", "sessions", "current"] => Route::PortalSession,
            ["internal", "v1", "clients", client, "portal-links"] => {
                Route::PortalLinks((*client).to_owned())
            }
            ["internal", "v1", "settings"] => Route::OperatorSettings,
            ["internal", "v1", "clients", client, "keys"] => {
                Route::ClientKeys((*client).to_owned())
            }
            ["internal", "v1", "clients", client, "keys", key] => {
                Route::ClientKey((*client).to_owned(), (*key).to_owned())
            }
            ["internal", "v1", "ingest-keys"] => Route::IngestKeys,
            ["internal", "v1", "ingest-keys", key] => Route::IngestKey((*key).to_owned()),
            ["internal", "v1", "events"] => Route::Events,
            ["internal", "v1", "tick"] => Route::Tick,
            ["internal", "v1", "subscriptions"] => Route::OperatorSubscriptions,
            ["internal", "v1", "subscriptions", id] => {
                Route::OperatorSubscription((*id).to_owned())
            }
            ["internal", "v1", "subscriptions", id, "disable"] => {
                Route::DisableSubscription((*id).to_owned())
            }
            ["internal", "v1", "subscriptions", id, "enable"] => {
                Route::EnableSubscription((*id).to_owned())
            }
            ["internal", "v1", "subscriptions", id, "test"] => {
                Route::TestSubscription((*id).to_owned())
            }
            ["internal", "v1", "subscriptions", id, "deliveries"] => {
                Route::SubscriptionDeliveries((*id).to_owned())
            }
            ["internal", "v1", "deliveries"] => Route::Deliveries,
            ["internal", "v1", "deliveries", id] => Route::Delivery((*id).to_owned()),
            ["internal", "v1", "deliveries", id, "replay"] => Route::Replay((*id).to_owned()),
            ["internal", "v1", "replays"] => Route::Replays,
            ["internal", "v1", "replays", id] => Route::OperatorReplay((*id).to_owned()),
            ["internal", "v1", "replays", id, "cancel"] => {
                Route::OperatorReplayCancel((*id).to_owned())
            }
            _ => return None,
        };
        Some(route)
    }

    /// The methods this route answers; anything else is a 405 with `Allow`.
    pub fn methods(&self) -> &'static [&'static str] {
        match self {
            Route::Health
            | Route::OperatorSettings
            | Route::OperatorSubscriptions
            | Route::OperatorSubscription(_)
            | Route::SubscriptionDeliveries(_)
            | Route::PartnerReplay(_)
            | Route::WebhookDeliveries(_)
            | Route::Deliveries
            | Route::OperatorReplay(_)
            | Route::Delivery(_) => &["GET"],
            Route::Webhooks | Route::ClientKeys(_) | Route::IngestKeys => &["GET", "POST"],
            Route::Webhook(_) => &["GET", "PATCH", "DELETE"],
            Route::PortalSession => &["GET", "DELETE"],
            Route::Events
            | Route::Tick
            | Route::DisableSubscription(_)
            | Route::EnableSubscription(_)
            | Route::TestSubscription(_)
            | Route::WebhookEnable(_)
            | Route::WebhookTest(_)
            | Route::WebhookRotate(_)
            | Route::WebhookReplays(_)
            | Route::WebhookDeliveryReplay(..)
            | Route::PartnerReplayCancel(_)
            | Route::Replays
            | Route::OperatorReplayCancel(_)
            | Route::PortalSessions
            | Route::PortalLinks(_)
            | Route::Replay(_) => &["POST"],
            Route::ClientKey(..) | Route::IngestKey(_) => &["DELETE"],
        }
    }

    /// Whether the route belongs to the operator API (admin token, not API keys).
    pub fn is_operator(&self) -> bool {
        !matches!(
            self,
            Route::Health
                | Route::Webhooks
                | Route::Webhook(_)
                | Route::WebhookEnable(_)
                | Route::WebhookTest(_)
                | Route::WebhookRotate(_)
                | Route::WebhookReplays(_)
                | Route::WebhookDeliveries(_)
                | Route::WebhookDeliveryReplay(..)
                | Route::PartnerReplay(_)
                | Route::PartnerReplayCancel(_)
                | Route::PortalSessions
                | Route::PortalSession
        )
    }

    /// Whether an API key of `scope` may call this route with `method` (the router asks
    /// once the key is authenticated; `/healthz` takes no credentials at all): a `partner`
    /// key every partner route, a `partner_read` key their `GET`s only, an `ingest` key event
    /// ingest only. No key may call another operator route: those take the admin token. A
    /// portal session may do what a `partner` key may, and read or end itself; a portal
    /// link nothing (it is only exchanged).
    pub fn allows(&self, scope: Scope, method: &str) -> bool {
        let own_session = matches!(self, Route::PortalSession);
        match scope {
            Scope::Partner => !self.is_operator() && !own_session,
            Scope::PartnerRead => !self.is_operator() && !own_session && method == "GET",
            Scope::Ingest => matches!(self, Route::Events),
            Scope::PortalSession => !self.is_operator(),
            Scope::PortalLink => false,
        }
    }

    /// The body size limit of this route.
    pub fn body_limit(&self) -> usize {
        match self {
            Route::Events => INGEST_BODY_LIMIT,
            _ => API_BODY_LIMIT,
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
    let request_id = IdKind::Request.generate(env.entropy);
    let (response, log, run_after) = match dispatch(env, req, &request_id, sender) {
        Ok((resp, run_after)) => (resp, None, run_after),
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
) -> Result<(Response, Option<RunNow>), ApiError> {
    let route = Route::parse(&req.path).ok_or_else(|| ApiError::not_found("Route"))?;
    if !route.methods().contains(&req.method.as_str()) {
        return Err(ApiError::method_not_allowed(route.methods()));
    }
    if req.body_truncated || req.body.len() > route.body_limit() {
        return Err(ApiError::payload_too_large(route.body_limit()));
    }
    if matches!(route, Route::Health) {
        return Ok((health(env, request_id)?, None));
    }
    crate::limits::check_auth_failures(env, req)?;
    if route.is_operator() {
        authorize_operator(env, req, &route)?;
        match route {
            Route::Events => {
                let (resp, run) = operator::ingest(env, req, request_id)?;
                return Ok((resp, Some(run)));
            }
            Route::Replay(id) => {
                let resp = operator::replay(env, &id, request_id)?;
                return Ok((resp, Some(RunNow::Delivery(id))));
            }
            _ => {}
        }
        let resp = match route {
            Route::OperatorSettings => Ok(operator::settings(env, request_id)),
            Route::ClientKeys(client) if req.method == "GET" => {
                keys::list(env, req, &client, request_id)
            }
            Route::ClientKeys(client) => keys::issue(env, req, &client, request_id),
            Route::ClientKey(client, key) => keys::revoke(env, &client, &key, request_id),
            Route::PortalLinks(client) => portal::mint(env, &client, request_id),
            Route::IngestKeys if req.method == "GET" => keys::list_ingest(env, req, request_id),
            Route::IngestKeys => keys::issue_ingest(env, req, request_id),
            Route::IngestKey(key) => keys::revoke_ingest(env, &key, request_id),
            Route::Tick => Ok(operator::tick(env, sender, request_id)),
            Route::OperatorSubscriptions => operator::subscriptions_list(env, req, request_id),
            Route::OperatorSubscription(id) => operator::subscription(env, &id, request_id),
            Route::DisableSubscription(id) => {
                operator::disable_subscription(env, req, &id, request_id)
            }
            Route::EnableSubscription(id) => {
                operator::enable_subscription(env, req, &id, request_id)
            }
            Route::TestSubscription(id) => ping::operator(env, sender, &id, request_id),
            Route::Replays => replays::operator_start(env, req, request_id),
            Route::Deliveries => deliveries::operator_search(env, req, request_id),
            Route::OperatorReplay(id) => replays::get(env, &id, None, request_id),
            Route::OperatorReplayCancel(id) => replays::cancel(env, &id, None, request_id),
            Route::SubscriptionDeliveries(id) => {
                deliveries::operator_list(env, req, &id, request_id)
            }
            Route::Delivery(id) => operator::delivery(env, &id, request_id),
            Route::Health
            | Route::Webhooks
            | Route::Webhook(_)
            | Route::WebhookEnable(_)
            | Route::WebhookTest(_)
            | Route::WebhookRotate(_)
            | Route::WebhookReplays(_)
            | Route::WebhookDeliveries(_)
            | Route::WebhookDeliveryReplay(..)
            | Route::PartnerReplay(_)
            | Route::PartnerReplayCancel(_)
            | Route::PortalSessions
            | Route::PortalSession
            | Route::Events
            | Route::Replay(_) => Err(ApiError::not_found("Route")),
        };
        return Ok((resp?, None));
    }
    if matches!(route, Route::PortalSessions) {
        return Ok((portal::exchange(env, req, request_id)?, None));
    }
    let key = auth::authenticate(env, req)?;
    if !route.allows(key.scope, &req.method) {
        return Err(ApiError::forbidden());
    }
    if matches!(route, Route::PortalSession) {
        return Ok((portal::current(env, req, &key, request_id)?, None));
    }
    let client_id = key.client_id;
    crate::limits::count_request(env, &client_id)?;
    if let Route::WebhookDeliveryReplay(id, dlv) = &route {
        let resp = deliveries::partner_replay(env, id, dlv, &client_id, request_id)?;
        return Ok((resp, Some(RunNow::Delivery(dlv.clone()))));
    }
    let resp = match (route, req.method.as_str()) {
        (Route::Webhooks, "GET") => partner::list(env, req, &client_id, request_id),
        (Route::Webhooks, _) => partner::create(env, req, &client_id, request_id),
        (Route::Webhook(id), "GET") => partner::get(env, &id, &client_id, request_id),
        (Route::Webhook(id), "PATCH") => options::update(env, req, &id, &client_id, request_id),
        (Route::Webhook(id), _) => partner::delete(env, &id, &client_id, request_id),
        (Route::WebhookRotate(id), _) => options::rotate(env, req, &id, &client_id, request_id),
        (Route::WebhookEnable(id), _) => partner::enable(env, req, &id, &client_id, request_id),
        (Route::WebhookReplays(id), _) => {
            replays::partner_start(env, req, &id, &client_id, request_id)
        }
        (Route::WebhookDeliveries(id), _) => {
            deliveries::partner_list(env, req, &id, &client_id, request_id)
        }
        (Route::PartnerReplay(id), _) => replays::get(env, &id, Some(&client_id), request_id),
        (Route::PartnerReplayCancel(id), _) => {
            replays::cancel(env, &id, Some(&client_id), request_id)
        }
        (Route::WebhookTest(id), _) => ping::partner(env, sender, &id, &client_id, request_id),
        _ => Err(ApiError::not_found("Route")),
    };
    Ok((resp?, None))
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
fn health<K: Kv>(env: &Env<'_, K>, request_id: &str) -> Result<Response, ApiError> {
    /// The body (keys sorted, as the envelope's).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Health<'a> {
        request_id: &'a str,
        server_time_ms: u64,
        status: &'static str,
    }
    env.kv.get(&HEALTH_PROBE)?;
    Ok(Response::json(
        200,
        &Health {
            request_id,
            server_time_ms: env.now_ms,
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
            "/internal/v1/tick",
            "/internal/v1/subscriptions",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/disable",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/enable",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/test",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/deliveries",
            "/internal/v1/deliveries/dlv_0123456789abcdef01234567",
            "/internal/v1/deliveries/dlv_0123456789abcdef01234567/replay",
            "/internal/v1/clients/acme/portal-links",
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
                    path == "/internal/v1/events",
                    "{method} {path}"
                );
            }
        }
    }

    fn issued(kv: &MemoryKv, client: &str, scope: Scope, seed: u64) -> String {
        let settings = Settings::default();
        let entropy = SeededEntropy::new(seed);
        let env = Env::new(1_700_000_000_000, kv, &settings, &entropy);
        auth::issue(&env, client, scope).expect("issued").1
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
