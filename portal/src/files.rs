//! The app's files, embedded at build time from `portal/static/`, with their content types
//! and a hash of their bytes (the `ETag`), computed by the compiler.

/// One embedded file.
#[derive(Debug)]
pub struct File {
    /// Its name under `/portal/` (`index.html` also answers `/portal/` itself).
    pub name: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
    /// FNV-1a of its bytes (the `ETag`).
    pub hash: u64,
}

/// FNV-1a (64-bit), at compile time: a cache validator, not a security measure.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// A [`File`] from `portal/static/<name>`.
macro_rules! file {
    ($name:literal, $type:expr) => {
        File {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../static/", $name)),
            hash: fnv1a(include_bytes!(concat!("../static/", $name))),
        }
    };
}

/// HTML.
const HTML: &str = "text/html; charset=utf-8";
/// JavaScript (module scripts).
const JS: &str = "text/javascript; charset=utf-8";
/// Style sheets.
const CSS: &str = "text/css; charset=utf-8";

/// Every file the portal serves; a request for any other name is a 404.
pub const FILES: &[File] = &[
    file!("index.html", HTML),
    file!("app.css", CSS),
    file!("app.js", JS),
    file!("api.js", JS),
    file!("ui.js", JS),
    file!("operator.js", JS),
    file!("partner.js", JS),
    file!("notices.js", JS),
    file!("loads.js", JS),
    file!("favicon.svg", "image/svg+xml"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_the_static_folder_is_served_and_no_other() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("static");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("portal/static")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut served: Vec<String> = FILES.iter().map(|f| f.name.to_owned()).collect();
        served.sort();
        assert_eq!(on_disk, served);
        for f in FILES {
            let expected = match f.name.rsplit('.').next() {
                Some("html") => HTML,
                Some("js") => JS,
                Some("css") => CSS,
                Some("svg") => "image/svg+xml",
                other => panic!("no content type for {other:?}"),
            };
            assert_eq!(f.content_type, expected, "{}", f.name);
        }
    }
}
