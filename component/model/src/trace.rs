//! The W3C trace context an event carries from its publish to its attempts.
//!
//! A publish that comes with a valid `traceparent` header keeps it with its event
//! ([`crate::env::Env::trace`]); each attempt then names it: to the host, in
//! [`HOST_HEADER`], when the host asks (`trace_context`: a host that exports traces makes a
//! span per attempt, a child of the publish's); to the receiver, as `traceparent`, when its
//! subscription asks for it.

/// The header an attempt tells the host its trace context and ids in (with
/// `trace_context`): `<subscriptionId> <eventId> <attempt number> <traceparent or ->`. The
/// host takes it off before sending.
pub const HOST_HEADER: &str = "x-edgehook-trace";

/// Whether `value` is a `traceparent` this service keeps: version `00`, a trace id of 32 and
/// a parent id of 16 lowercase hex digits, neither all zeros, and 2 hex digits of flags.
pub fn valid(value: &str) -> bool {
    let b = value.as_bytes();
    let hex = |s: &[u8]| {
        s.iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    let nonzero = |s: &[u8]| s.iter().any(|c| *c != b'0');
    b.len() == 55
        && b.starts_with(b"00-")
        && b[35] == b'-'
        && b[52] == b'-'
        && hex(&b[3..35])
        && hex(&b[36..52])
        && hex(&b[53..])
        && nonzero(&b[3..35])
        && nonzero(&b[36..52])
}

/// The [`HOST_HEADER`] value of attempt `attempt` of `event_id` to `subscription_id`, in
/// the trace `traceparent` (if its publish had one).
pub fn host_header(
    subscription_id: &str,
    event_id: &str,
    attempt: usize,
    traceparent: Option<&str>,
) -> String {
    format!(
        "{subscription_id} {event_id} {attempt} {}",
        traceparent.unwrap_or("-")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_version_00_traceparent_with_nonzero_ids_is_kept() {
        assert!(valid(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(!valid(bad), "{bad:?}");
        }
    }
}
