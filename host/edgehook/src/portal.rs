//! Which requests `serve` sends to the web portal's component (`portal/`, run by
//! [`edgehook_runtime::Baseline::portal`]) rather than to the service's: the same split as
//! `spin.toml`'s two `[[trigger.http]]` routes.

/// Where the web portal lives: this path and every path under it.
pub const PORTAL_PATH: &str = "/portal";

/// Whether `path` is the portal's: `/portal` or under `/portal/` (not `/portals`, not the
/// API's `/v1/portal/...`).
pub fn is_portal(path: &str) -> bool {
    path.strip_prefix(PORTAL_PATH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_portal_is_its_path_and_what_is_under_it_only() {
        for path in ["/portal", "/portal/", "/portal/app.js", "/portal/x/y"] {
            assert!(is_portal(path), "{path}");
        }
        for path in [
            "/",
            "/portals",
            "/portal.js",
            "/v1/portal/sessions",
            "/Portal/",
        ] {
            assert!(!is_portal(path), "{path}");
        }
    }
}
