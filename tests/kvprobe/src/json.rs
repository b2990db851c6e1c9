//! The little JSON the probe writes, by hand (no serde: the probe stays small and quick to
//! build).

/// Appends `s` as a JSON string.
pub fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `{"error": <message>}`.
pub fn error(message: &str) -> String {
    let mut out = String::from("{\"error\":");
    string(&mut out, message);
    out.push('}');
    out
}

/// Bytes for a detail line: text if it is short UTF-8, else its length and first bytes in
/// hex.
pub fn show(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "none".into(),
        Some(b) if b.len() <= 40 => match std::str::from_utf8(b) {
            Ok(s) if !s.chars().any(char::is_control) => format!("{s:?}"),
            _ => format!("{} bytes {}", b.len(), hex(b)),
        },
        Some(b) => format!("{} bytes, first {}", b.len(), hex(&b[..16])),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
