//! Event ingest: validating a published load event.
//!
//! The body of a delivery is the load exactly as it was published, so ingest validates the
//! bytes without ever re-serializing them.

/// The event types the service emits (SPEC §6). Nothing else is accepted.
pub const EVENT_TYPES: [&str; 3] = ["load.created", "load.updated", "load.status_changed"];

/// Whether `s` is one of [`EVENT_TYPES`].
pub fn is_event_type(s: &str) -> bool {
    EVENT_TYPES.contains(&s)
}

/// Why a published event was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishError {
    /// Not one of [`EVENT_TYPES`]; carries the rejected type.
    UnknownEventType(String),
    /// The load is not a JSON object with a string `id`, or is too large.
    InvalidLoad(String),
    /// The store failed; nothing was accepted.
    StoreUnavailable(String),
    /// The idempotency key was used for a different event.
    Conflict(String),
}

/// What ingest did with an accepted event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishReceipt {
    /// The stored event's id (`evt_...`).
    pub event_id: edgehook_storage::ids::EventId,
    /// Deliveries created, one per matching active subscription.
    pub deliveries: u32,
    /// When the earliest created attempt is due (ms since the epoch), if any.
    pub next_due_ms: Option<u64>,
    /// True when an `Idempotency-Key` named an event accepted before: nothing new was
    /// delivered (a half-done fan-out was finished).
    pub replayed: bool,
}

/// Largest load accepted, in bytes (also the largest body event ingest reads).
pub const LOAD_LIMIT: usize = 256 * 1024;

/// Checks an event before anything is stored: a known type, and a load that is a JSON
/// object with a non-empty string `id`, at most [`LOAD_LIMIT`] bytes.
pub fn validate(event_type: &str, load: &[u8]) -> Result<(), PublishError> {
    load_id(event_type, load).map(drop)
}

/// [`validate`], and the load's `id` (what a support desk looks its events up by) from the
/// same single reading of the load.
pub fn load_id(event_type: &str, load: &[u8]) -> Result<String, PublishError> {
    if !is_event_type(event_type) {
        return Err(PublishError::UnknownEventType(event_type.to_owned()));
    }
    if load.len() > LOAD_LIMIT {
        return Err(PublishError::InvalidLoad(format!(
            "the load is larger than {} KiB",
            LOAD_LIMIT / 1024
        )));
    }
    match serde_json::from_slice::<LoadShape>(load) {
        Ok(LoadShape::Object { id: Some(id) }) => Ok(id),
        Ok(LoadShape::Object { id: None }) => Err(PublishError::InvalidLoad(
            "the load must have a non-empty string \"id\"".into(),
        )),
        Ok(LoadShape::NonEmptyString(_) | LoadShape::Other) => Err(PublishError::InvalidLoad(
            "the load must be a JSON object".into(),
        )),
        Err(e) => Err(PublishError::InvalidLoad(format!(
            "the load is not valid JSON: {e}"
        ))),
    }
}

/// What validation needs of a load: that it is one JSON object (the whole text checked),
/// and whether its `id` (the last one, as in any JSON reader) is a non-empty string.
///
/// Every value is read exactly as a `serde_json::Value` would be (every number in range,
/// every string and escape valid, the same depth limit) and dropped, never built: a load of
/// many kilobytes costs a walk over its bytes, not a tree of maps and strings. (`IgnoredAny`
/// is not enough: it skips numbers without reading them, so it accepts `1e400`, which a
/// `Value`, and so every receiver parsing into doubles, refuses.) Any value is taken
/// (`deserialize_any`), an object or not, so no type error is ever built: serde's type
/// errors format floats, which costs the component about 20 KiB of code.
enum LoadShape {
    /// A JSON object; `id`: its `id`, if that is a non-empty string.
    Object { id: Option<String> },
    /// A non-empty string (what an `id` must be).
    NonEmptyString(String),
    /// Any other JSON value.
    Other,
}

impl<'de> serde::Deserialize<'de> for LoadShape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = LoadShape;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }

            fn visit_bool<E>(self, _: bool) -> Result<LoadShape, E> {
                Ok(LoadShape::Other)
            }

            fn visit_i64<E>(self, _: i64) -> Result<LoadShape, E> {
                Ok(LoadShape::Other)
            }

            fn visit_u64<E>(self, _: u64) -> Result<LoadShape, E> {
                Ok(LoadShape::Other)
            }

            fn visit_f64<E>(self, _: f64) -> Result<LoadShape, E> {
                Ok(LoadShape::Other)
            }

            fn visit_str<E>(self, s: &str) -> Result<LoadShape, E> {
                Ok(match s.is_empty() {
                    true => LoadShape::Other,
                    false => LoadShape::NonEmptyString(s.to_owned()),
                })
            }

            fn visit_unit<E>(self) -> Result<LoadShape, E> {
                Ok(LoadShape::Other)
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<LoadShape, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(LoadShape::Other)
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<LoadShape, A::Error> {
                let mut id = None;
                while let Some(IsId(is_id)) = map.next_key::<IsId>()? {
                    if is_id {
                        id = match map.next_value::<LoadShape>()? {
                            LoadShape::NonEmptyString(s) => Some(s),
                            _ => None,
                        };
                    } else {
                        map.next_value::<Skip>()?;
                    }
                }
                Ok(LoadShape::Object { id })
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Any JSON value below the top, read as [`LoadShape`] reads one and dropped (unlike
/// `IgnoredAny`, which skips numbers without reading them).
struct Skip;

impl<'de> serde::Deserialize<'de> for Skip {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Skip;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }

            fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_unit<E>(self) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Skip)
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
                while map.next_key::<Skip>()?.is_some() {
                    map.next_value::<Skip>()?;
                }
                Ok(Skip)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// A key of an object, read only to tell whether it is `id` (without copying it).
struct IsId(bool);

impl<'de> serde::Deserialize<'de> for IsId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = IsId;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }

            fn visit_str<E>(self, s: &str) -> Result<IsId, E> {
                Ok(IsId(s == "id"))
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_load_object_with_a_string_id() {
        assert_eq!(
            validate("load.created", br#"{"id":"L1","status":"ASSIGNED"}"#),
            Ok(())
        );
    }

    #[test]
    fn refuses_unknown_types_and_bad_loads() {
        assert!(matches!(
            validate("load.deleted", b"{}"),
            Err(PublishError::UnknownEventType(t)) if t == "load.deleted"
        ));
        for bad in [
            &b"[]"[..],
            b"{}",
            br#"{"id":7}"#,
            br#"{"id":""}"#,
            b"{",
            b"",
        ] {
            assert!(
                matches!(
                    validate("load.updated", bad),
                    Err(PublishError::InvalidLoad(_))
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // Not an object, whatever it is; broken text; an id that is there and then replaced.
        for (bad, says) in [
            (&b"[1,2]"[..], "JSON object"),
            (b"\"L1\"", "JSON object"),
            (br#"{"id":"L1""#, "not valid JSON"),
            (br#"{"id":"L1"} x"#, "not valid JSON"),
            (br#"{"id":"L1","id":null}"#, "non-empty string"),
            // What a `Value` refuses is refused: a number out of range, a lone surrogate.
            (br#"{"id":"L1","f":1e400}"#, "not valid JSON"),
            (br#"{"id":"L1","s":["\ud800"]}"#, "not valid JSON"),
        ] {
            match validate("load.updated", bad) {
                Err(PublishError::InvalidLoad(m)) => assert!(m.contains(says), "{m}"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            validate(
                "load.created",
                br#"{"stops":[{"a":{"b":[1,2.5,null,true]}}],"id":"L\u0031","x":"\n"}"#
            ),
            Ok(())
        );
        let big = format!(r#"{{"id":"x","pad":"{}"}}"#, "a".repeat(LOAD_LIMIT));
        assert!(matches!(
            validate("load.updated", big.as_bytes()),
            Err(PublishError::InvalidLoad(_))
        ));
    }
}
