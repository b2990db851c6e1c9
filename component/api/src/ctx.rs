//! What every handler is given: the request, its id, the world of the call, the sender of
//! attempts run now, and who is calling. The router builds one per request once the
//! route's credentials are checked; handlers read it instead of taking each part as a
//! parameter, and every envelope they answer takes its `requestId` from it.

use crate::auth::ApiKeyRecord;
use edgehook_delivery::Sender;
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::http::{Request, Response};
use edgehook_model::ids::{ApiKeyId, ClientId, DeliveryId, ReplayJobId, SubscriptionId};
use edgehook_storage::kv::Kv;
use serde::Serialize;

/// Who is calling, as the route's credentials showed.
#[derive(Debug)]
pub enum Caller {
    /// Nobody checked: a route that takes no credentials (`/healthz`, a portal link's
    /// exchange, whose token is its body).
    Anonymous,
    /// The operator: the admin token, or a key its scope lets call the operator route.
    Operator,
    /// An API key or a portal session, acting for its client.
    Key(ApiKeyRecord),
}

impl Caller {
    /// The client the caller acts for; empty unless it is a key (an ingest key acts for
    /// none either).
    pub fn client_id(&self) -> &ClientId {
        static NONE: ClientId = ClientId::NONE;
        match self {
            Caller::Key(key) => &key.client_id,
            Caller::Anonymous | Caller::Operator => &NONE,
        }
    }
}

/// One request as its handler sees it.
pub struct Ctx<'a, K: Kv> {
    /// The world of this call: time, store, settings, randomness, log.
    pub env: &'a Env<'a, K>,
    /// The request.
    pub req: &'a Request,
    /// The id given to this request: in every envelope and in `X-Request-Id`.
    pub request_id: &'a str,
    /// Sends the attempts a handler runs at once (a test delivery, a tick).
    pub sender: &'a dyn Sender,
    /// Who is calling.
    pub caller: Caller,
}

impl<'a, K: Kv> Ctx<'a, K> {
    /// The context of a request whose credentials are not checked yet (an anonymous
    /// caller).
    pub fn new(
        env: &'a Env<'a, K>,
        req: &'a Request,
        request_id: &'a str,
        sender: &'a dyn Sender,
    ) -> Self {
        Ctx {
            env,
            req,
            request_id,
            sender,
            caller: Caller::Anonymous,
        }
    }

    /// A success envelope, `{"data": data, "requestId": ...}`.
    pub fn data<T: Serialize>(&self, status: u16, data: T) -> Response {
        Response::data(status, data, self.request_id)
    }
}

/// A subscription id from a path: anything that is not one is a 404, as an unknown id is.
pub fn subscription_id(s: &str) -> Result<SubscriptionId, ApiError> {
    SubscriptionId::parse(s).ok_or_else(|| ApiError::not_found("Subscription"))
}

/// A delivery id from a path (404 if it is not one).
pub fn delivery_id(s: &str) -> Result<DeliveryId, ApiError> {
    DeliveryId::parse(s).ok_or_else(|| ApiError::not_found("Delivery"))
}

/// A replay job's id from a path (404 if it is not one).
pub fn replay_job_id(s: &str) -> Result<ReplayJobId, ApiError> {
    ReplayJobId::parse(s).ok_or_else(|| ApiError::not_found("Replay"))
}

/// An API key's id from a path (404 if it is not one).
pub fn api_key_id(s: &str) -> Result<ApiKeyId, ApiError> {
    ApiKeyId::parse(s).ok_or_else(|| ApiError::not_found("API key"))
}
