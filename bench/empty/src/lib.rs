//! The benchmark baseline: a `wasi:http/incoming-handler` that answers every request
//! `200 {"ok":true}` without reading it. Built for `wasm32-wasip2` by `host/runtime/build.rs`.

#[cfg(target_arch = "wasm32")]
#[allow(
    unsafe_code,
    missing_docs,
    reason = "wit-bindgen's generated glue and `export!` expand to unsafe code"
)]
mod shell {
    mod bindings {
        wit_bindgen::generate!({
            path: "../../wit",
            world: "edgehook:webhooks/baseline",
            generate_all,
        });
    }

    use bindings::exports::wasi::http::incoming_handler::Guest;
    use bindings::wasi::http::types::{
        Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
    };

    struct Empty;

    bindings::export!(Empty with_types_in bindings);

    impl Guest for Empty {
        fn handle(_request: IncomingRequest, out: ResponseOutparam) {
            let headers = Fields::new();
            let _ = headers.append("content-type", b"application/json");
            let response = OutgoingResponse::new(headers);
            let Ok(body) = response.body() else { return };
            ResponseOutparam::set(out, Ok(response));
            if let Ok(stream) = body.write() {
                let _ = stream.blocking_write_and_flush(br#"{"ok":true}"#);
            }
            let _ = OutgoingBody::finish(body, None);
        }
    }
}
