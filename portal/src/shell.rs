//! The one module that sees generated bindings: a `wasi:http` request → [`crate::respond`]
//! → a `wasi:http` response with [`crate::SECURITY_HEADERS`].

#![allow(
    unsafe_code,
    missing_docs,
    reason = "wit-bindgen's generated glue and `export!` expand to unsafe code"
)]

mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "edgehook:webhooks/portal",
        generate_all,
    });
}

use bindings::exports::wasi::http::incoming_handler::Guest;
use bindings::wasi::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Portal;

bindings::export!(Portal with_types_in bindings);

/// The most bytes one `blocking-write-and-flush` may carry.
const CHUNK: usize = 4096;

impl Guest for Portal {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let method = match request.method() {
            Method::Get => "GET".to_owned(),
            Method::Head => "HEAD".to_owned(),
            Method::Post => "POST".to_owned(),
            Method::Put => "PUT".to_owned(),
            Method::Delete => "DELETE".to_owned(),
            Method::Patch => "PATCH".to_owned(),
            Method::Options => "OPTIONS".to_owned(),
            Method::Connect => "CONNECT".to_owned(),
            Method::Trace => "TRACE".to_owned(),
            Method::Other(other) => other,
        };
        let path = request.path_with_query().unwrap_or_default();
        let if_none_match = request
            .headers()
            .get("if-none-match")
            .first()
            .map(|v| String::from_utf8_lossy(v).into_owned());
        let id = crate::request_id(&bindings::wasi::random::random::get_random_bytes(12));
        let answer = crate::respond(&method, &path, if_none_match.as_deref(), &id);

        let headers = Fields::new();
        for (name, value) in crate::SECURITY_HEADERS {
            let _ = headers.append(name, value.as_bytes());
        }
        // Every answer names its request, as the service's do (the host logs it).
        let _ = headers.append("x-request-id", id.as_bytes());
        for (name, value) in &answer.headers {
            let _ = headers.append(name, value.as_bytes());
        }
        let response = OutgoingResponse::new(headers);
        let _ = response.set_status_code(answer.status);
        let Ok(body) = response.body() else { return };
        ResponseOutparam::set(out, Ok(response));
        if let Ok(stream) = body.write() {
            for chunk in answer.body.chunks(CHUNK) {
                if stream.blocking_write_and_flush(chunk).is_err() {
                    break;
                }
            }
        }
        let _ = OutgoingBody::finish(body, None);
    }
}
