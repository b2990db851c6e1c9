//! Request bodies every JSON route reads the same way: `Content-Type: application/json`
//! (else 415), JSON (else 400 `invalid_json`), an object (else 422 `invalid_type`) whose
//! fields are among the route's (else 422 `unknown_field`, so a typo is caught instead of
//! ignored).

use edgehook_model::error::{ApiError, FieldError};
use edgehook_model::http::Request;
use serde_json::{Map, Value};

/// A 422 about one field.
pub(crate) fn invalid(field: &str, code: &'static str, message: &str) -> ApiError {
    ApiError::validation(vec![FieldError::new(field, code, message)])
}

/// The body, parsed as JSON, of any shape (415 and 400 as above).
pub(crate) fn json(req: &Request) -> Result<Value, ApiError> {
    let content_type = req.header_str("content-type").unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::unsupported_media_type());
    }
    serde_json::from_slice(&req.body).map_err(ApiError::invalid_json)
}

/// The body as an object whose fields are among `fields`.
pub(crate) fn object(req: &Request, fields: &[&str]) -> Result<Map<String, Value>, ApiError> {
    let Value::Object(obj) = json(req)? else {
        return Err(invalid(
            "body",
            "invalid_type",
            "The body must be a JSON object.",
        ));
    };
    if let Some(other) = obj.keys().find(|k| !fields.contains(&k.as_str())) {
        let message = format!(
            "Unknown field; this request takes {}.",
            edgehook_model::error::comma_list(fields.iter().copied())
        );
        return Err(invalid(other, "unknown_field", &message));
    }
    Ok(obj)
}

/// [`object`] for a route whose body is optional: `None` without one.
pub(crate) fn optional_object(
    req: &Request,
    fields: &[&str],
) -> Result<Option<Map<String, Value>>, ApiError> {
    match req.body.is_empty() {
        true => Ok(None),
        false => object(req, fields).map(Some),
    }
}

/// A JSON number that is a whole number from 0 to `u64::MAX`, as a `u64`: `165` and also
/// `165.0` (JSON Schema's `integer` counts both, and so does every field documented as one);
/// `None` for anything else (a fraction, a negative number, a string, 2^64 and beyond).
pub(crate) fn whole_number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        let f = value.as_f64()?;
        ((0.0..18_446_744_073_709_551_616.0).contains(&f) && f.trunc() == f).then_some(f as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::whole_number;
    use serde_json::json;

    #[test]
    fn a_whole_number_may_be_written_as_a_float() {
        for (v, n) in [
            (json!(165), Some(165)),
            (json!(165.0), Some(165)),
            (json!(0.0), Some(0)),
            (json!(u64::MAX), Some(u64::MAX)),
            (json!(9_007_199_254_740_993.0), Some(9_007_199_254_740_992)),
            (json!(165.5), None),
            (json!(-1), None),
            (json!(-1.0), None),
            (json!(18_446_744_073_709_551_616.0), None),
            (json!("165"), None),
            (json!(null), None),
        ] {
            assert_eq!(whole_number(&v), n, "{v}");
        }
    }
}
