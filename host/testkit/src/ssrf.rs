//! The SSRF corpus (`tests/ssrf-corpus.json`) as the tests read it: the component's tests
//! (every URL at create, and at send through the production sender) and the sender's own.

use std::net::IpAddr;

/// One entry of the corpus.
pub struct Entry {
    /// The URL, as a partner would send it.
    pub url: String,
    /// The trick it tries, in words.
    pub trick: String,
    /// What create answers: `accepted`, or the detail code of its 422.
    pub create: String,
    /// What a name resolves to, for the tests' static resolver (none for a literal).
    pub resolves_to: Vec<IpAddr>,
}

/// Every entry of the corpus.
pub fn corpus() -> Vec<Entry> {
    let text = include_str!("../../../tests/ssrf-corpus.json");
    let doc: serde_json::Value = serde_json::from_str(text).expect("corpus is JSON");
    doc["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| Entry {
            url: e["url"].as_str().expect("url").to_owned(),
            trick: e["trick"].as_str().expect("trick").to_owned(),
            create: e["create"].as_str().expect("create").to_owned(),
            resolves_to: e["resolvesTo"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|ip| ip.as_str().expect("ip").parse().expect("an IP address"))
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// The host of a corpus URL the way the sender asks its resolver: no user info, lower case,
/// no trailing dot.
pub fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = host.split(':').next().unwrap_or("");
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The names a sender may look up when sent every corpus URL, sorted: only those of entries
/// whose URL gives nothing away (create `accepted`). Local names, names that spell an
/// address, and IP literals in every notation must be refused without a lookup.
pub fn expected_lookups(entries: &[Entry]) -> Vec<String> {
    let mut names: Vec<String> = entries
        .iter()
        .filter(|e| e.create == "accepted")
        .map(|e| host_of(&e.url))
        .collect();
    names.sort();
    names
}
