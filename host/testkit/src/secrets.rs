//! Searching stored bytes for signing secrets, byte for byte: every form a secret could be
//! stored in ([`forms`]), and where they are found in bytes ([`holds`]) or in the files of a
//! directory ([`files_holding`]). The tests that prove secrets are sealed at rest (the
//! embedded store, Redis, Spin's SQLite file and Redis, `edgehook backup`'s copy) use it.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use std::path::Path;

/// Every form a secret could be stored in: its text; the text in base64 (each alphabet,
/// padded or not); and the key bytes a `whsec_` (Standard Webhooks) secret encodes.
pub fn forms(secret: &str) -> Vec<Vec<u8>> {
    let mut forms = vec![secret.as_bytes().to_vec()];
    for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
        forms.push(engine.encode(secret).into_bytes());
    }
    if let Some(body) = secret.strip_prefix("whsec_") {
        for engine in [STANDARD, URL_SAFE_NO_PAD] {
            if let Ok(raw) = engine.decode(body) {
                forms.push(raw);
            }
        }
    }
    forms
}

/// The forms of every one of `secrets`.
pub fn needles<S: AsRef<str>>(secrets: &[S]) -> Vec<Vec<u8>> {
    secrets.iter().flat_map(|s| forms(s.as_ref())).collect()
}

/// Whether `bytes` hold any of `needles`.
pub fn holds(bytes: &[u8], needles: &[Vec<u8>]) -> bool {
    needles
        .iter()
        .any(|n| !n.is_empty() && bytes.windows(n.len()).any(|w| w == n.as_slice()))
}

/// Every file under `dir` (recursively) whose bytes hold any of `needles`.
pub fn files_holding(dir: &Path, needles: &[Vec<u8>]) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()) {
            if path.is_dir() {
                todo.push(path);
            } else if std::fs::read(&path).is_ok_and(|b| holds(&b, needles)) {
                found.push(path.display().to_string());
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_found_in_each_form_and_nothing_else_is() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let raw = STANDARD.decode(&secret[6..]).expect("base64");
        let all = forms(secret);
        for stored in [
            secret.as_bytes().to_vec(),
            URL_SAFE_NO_PAD.encode(secret).into_bytes(),
            STANDARD.encode(secret).into_bytes(),
            raw,
        ] {
            let mut bytes = b"prefix ".to_vec();
            bytes.extend(&stored);
            bytes.extend(b" suffix");
            assert!(holds(&bytes, &all));
        }
        assert!(
            !holds(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa", &all),
            "a part"
        );
        let dir = crate::temp_dir("secrets-search");
        std::fs::create_dir_all(dir.join("a/b")).expect("dirs");
        std::fs::write(
            dir.join("a/b/file"),
            [b"x".as_slice(), secret.as_bytes()].concat(),
        )
        .expect("write");
        std::fs::write(dir.join("other"), b"nothing").expect("write");
        let found = files_holding(&dir, &needles(&[secret]));
        assert_eq!(found, [dir.join("a/b/file").display().to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
