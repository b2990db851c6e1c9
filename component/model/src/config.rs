//! Settings read from the host's `wasi:config` store.
//!
//! Keys are snake_case because Spin variable names allow only lowercase letters, digits and
//! underscores; our own host uses the same names. [`KEYS`] is the complete list: the Spin
//! manifest test checks that `spin.toml` declares every one of them.

use crate::seal::{SealKey, SealKeys};

/// Every configuration key the component reads, with its default (`None`: no default).
pub const KEYS: &[(&str, Option<&str>)] = &[
    ("admin_token", None),
    ("attempt_timeout_ms", Some("10000")),
    ("max_concurrency", Some("16")),
    ("disable_after_failures", Some("5")),
    ("retention_days", Some("30")),
    ("subscription_limit", Some("100")),
    ("allow_private_targets", Some("false")),
    ("allow_http", Some("false")),
    ("rate_limit_per_minute", Some("1200")),
    ("opportunistic_tick_s", Some("10")),
    ("trace_context", Some("false")),
    ("retry_delays_ms", Some("60000,300000")),
    ("alert_url", Some("")),
    ("alert_secret", Some("")),
    ("seal_key", None),
    ("seal_previous_key", Some("")),
    ("auto_recover", Some("false")),
    (
        "recover_delays_ms",
        Some("600000,3600000,21600000,86400000"),
    ),
];

/// The component's settings, parsed and defaulted.
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    /// Bearer token of the operator API; operator routes answer 401 while it is unset.
    pub admin_token: Option<String>,
    /// Time allowed to one delivery attempt, in milliseconds.
    pub attempt_timeout_ms: u64,
    /// How many attempts one tick or publish runs at the same time.
    pub max_concurrency: u32,
    /// Consecutive deliveries that must end failed before a subscription is disabled.
    pub disable_after_failures: u32,
    /// Days delivery records are kept before tick purges them.
    pub retention_days: u32,
    /// Active subscriptions one API client may have.
    pub subscription_limit: u32,
    /// Whether subscription URLs may point at non-global addresses and `localhost`
    /// (for local development and tests only; `https` still required unless `allow_http`).
    pub allow_private_targets: bool,
    /// Whether subscription URLs may be plain `http://` (for local development and tests
    /// only; hosts must still be public unless `allow_private_targets`).
    pub allow_http: bool,
    /// Partner API requests one API client may make per clock minute (0: no limit).
    pub rate_limit_per_minute: u32,
    /// After answering a request, run the due work if no instance did so in the last this
    /// many seconds (0: never). For hosts with no timer of their own (Spin without a
    /// CronJob); hosts that call `tick` themselves set it to 0.
    pub opportunistic_tick_s: u32,
    /// Whether every attempt tells the host its trace context and ids (the
    /// [`crate::trace::HOST_HEADER`] header, which the host takes off): for a host that
    /// exports traces (`serve --otlp-endpoint`); never set where nothing takes it off.
    pub trace_context: bool,
    /// Delay before attempt 2 and before attempt 3 after the previous attempt failed, in
    /// milliseconds (SPEC §8: about 1 and 5 minutes; each gets up to +10 % jitter).
    pub retry_delays_ms: [u64; 2],
    /// Where operator alerts go (`subscription.disabled`, `subscription.enabled`), signed
    /// like any delivery with [`Settings::alert_secret`]; `None`: log lines only.
    pub alert_url: Option<String>,
    /// The signing secret of operator alerts (required with `alert_url`, at least 24
    /// characters).
    pub alert_secret: Option<String>,
    /// The keys signing secrets are sealed under in the store (`seal_key`, 64 hex digits;
    /// `seal_previous_key` during a key rotation): without a current key, secrets are stored
    /// as they are.
    pub seal: SealKeys,
    /// Whether a subscription disabled for a failure streak is probed with a signed
    /// `webhook.ping` (10 min, 1 h, 6 h and 24 h on) and enabled again, with a replay of
    /// what it missed, when a probe is answered 2xx.
    pub auto_recover: bool,
    /// When each recovery probe is sent: the first this long after the disable, each next
    /// this long after the probe before it failed (`recover_delays_ms`).
    pub recover_delays_ms: ProbeDelays,
}

/// The most probes one recovery may send (`recover_delays_ms` lists at most this many).
pub const MAX_PROBES: usize = 8;

/// The delays of a recovery's probes, in milliseconds: 1 to [`MAX_PROBES`] of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeDelays {
    ms: [u64; MAX_PROBES],
    len: usize,
}

impl ProbeDelays {
    /// The design's back-off: 10 minutes, then 1 hour, 6 hours and 24 hours on.
    pub const DEFAULT: ProbeDelays = ProbeDelays {
        ms: [600_000, 3_600_000, 21_600_000, 86_400_000, 0, 0, 0, 0],
        len: 4,
    };

    /// The delay before probe `n` (1-based); `None` past the last.
    pub fn before_probe(&self, n: usize) -> Option<u64> {
        self.as_slice().get(n.checked_sub(1)?).copied()
    }

    /// Every delay, in order.
    pub fn as_slice(&self) -> &[u64] {
        &self.ms[..self.len]
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<redacted>"),
            )
            .field("attempt_timeout_ms", &self.attempt_timeout_ms)
            .field("max_concurrency", &self.max_concurrency)
            .field("disable_after_failures", &self.disable_after_failures)
            .field("retention_days", &self.retention_days)
            .field("subscription_limit", &self.subscription_limit)
            .field("allow_private_targets", &self.allow_private_targets)
            .field("allow_http", &self.allow_http)
            .field("rate_limit_per_minute", &self.rate_limit_per_minute)
            .field("opportunistic_tick_s", &self.opportunistic_tick_s)
            .field("trace_context", &self.trace_context)
            .field("retry_delays_ms", &self.retry_delays_ms)
            .field("alert_url", &self.alert_url)
            .field(
                "alert_secret",
                &self.alert_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("seal", &self.seal)
            .field("auto_recover", &self.auto_recover)
            .field("recover_delays_ms", &self.recover_delays_ms.as_slice())
            .finish()
    }
}

/// A configuration value that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The offending key.
    pub key: String,
    /// What is wrong with its value.
    pub problem: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "config key {}: {}", self.key, self.problem)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self::from_pairs(std::iter::empty::<(String, String)>())
            .expect("the built-in defaults parse")
    }
}

impl Settings {
    /// Parses settings from key/value pairs (what `wasi:config/store.get-all` returns).
    /// Unknown keys are ignored; a known key with a value that does not parse is an error,
    /// so that a typo in a deployment is loud rather than silently defaulted.
    pub fn from_pairs<S: AsRef<str>>(
        pairs: impl IntoIterator<Item = (S, S)>,
    ) -> Result<Self, ConfigError> {
        let given = Given::new(pairs);
        let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(Settings {
            admin_token: given.value("admin_token").map(str::to_owned),
            attempt_timeout_ms: given.number("attempt_timeout_ms", 100, 120_000)?,
            max_concurrency: narrow(given.number("max_concurrency", 1, 256)?),
            disable_after_failures: narrow(given.number("disable_after_failures", 1, 1000)?),
            retention_days: narrow(given.number("retention_days", 1, 3650)?),
            subscription_limit: narrow(given.number("subscription_limit", 1, 100_000)?),
            allow_private_targets: given.flag("allow_private_targets")?,
            allow_http: given.flag("allow_http")?,
            rate_limit_per_minute: narrow(given.number("rate_limit_per_minute", 0, 1_000_000)?),
            opportunistic_tick_s: narrow(given.number("opportunistic_tick_s", 0, 3600)?),
            trace_context: given.flag("trace_context")?,
            retry_delays_ms: given.retry_delays()?,
            alert_url: given.alert_url()?,
            alert_secret: given.alert_secret()?,
            seal: SealKeys {
                current: given.seal_key("seal_key")?,
                previous: given.seal_key("seal_previous_key")?,
            },
            auto_recover: given.flag("auto_recover")?,
            recover_delays_ms: given.recover_delays()?,
        })
    }
}

/// The values given for the known keys ([`KEYS`]), one slot per key, the last value given
/// winning; nothing is copied (every request parses the settings, so this stays
/// allocation-free but for the values kept).
struct Given<S>([Option<S>; KEYS.len()]);

impl<S: AsRef<str>> Given<S> {
    fn new(pairs: impl IntoIterator<Item = (S, S)>) -> Self {
        let mut given: [Option<S>; KEYS.len()] = std::array::from_fn(|_| None);
        for (k, v) in pairs {
            if let Some(i) = KEYS.iter().position(|(name, _)| *name == k.as_ref()) {
                given[i] = Some(v);
            }
        }
        Given(given)
    }

    /// The value of `key`, trimmed, or its default; `None` if neither is there or not empty.
    fn value(&self, key: &str) -> Option<&str> {
        let i = KEYS.iter().position(|(name, _)| *name == key)?;
        self.0[i]
            .as_ref()
            .map(|v| v.as_ref().trim())
            .filter(|v| !v.is_empty())
            .or(KEYS[i].1)
            .filter(|v| !v.is_empty())
    }

    fn number(&self, key: &str, min: u64, max: u64) -> Result<u64, ConfigError> {
        let raw = self.value(key).unwrap_or_default();
        raw.parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| ConfigError {
                key: key.to_owned(),
                problem: format!(
                    "expected a whole number from {min} to {max}, got {}",
                    crate::error::quoted(raw)
                ),
            })
    }

    fn flag(&self, key: &str) -> Result<bool, ConfigError> {
        match self.value(key) {
            Some("true") | Some("1") | Some("yes") => Ok(true),
            Some("false") | Some("0") | Some("no") | None => Ok(false),
            Some(other) => Err(ConfigError {
                key: key.to_owned(),
                problem: format!(
                    "expected true or false, got {}",
                    crate::error::quoted(other)
                ),
            }),
        }
    }

    fn retry_delays(&self) -> Result<[u64; 2], ConfigError> {
        let (ms, len) = self.delays("retry_delays_ms", 86_400_000)?;
        match (len, ms) {
            (2, [first, second, ..]) => Ok([first, second]),
            _ => Err(self.bad_delays("retry_delays_ms", "two delays", 86_400_000)),
        }
    }

    /// The probes' delays: the built-in back-off when not given (nothing to parse on the
    /// way of every request), else 1 to [`MAX_PROBES`] delays of 1 s to 7 days.
    fn recover_delays(&self) -> Result<ProbeDelays, ConfigError> {
        const WEEK_MS: u64 = 7 * 86_400_000;
        if !self.given("recover_delays_ms") {
            return Ok(ProbeDelays::DEFAULT);
        }
        let (ms, len) = self.delays("recover_delays_ms", WEEK_MS)?;
        Ok(ProbeDelays { ms, len })
    }

    /// Whether `key` was given a value that is not empty.
    fn given(&self, key: &str) -> bool {
        KEYS.iter()
            .position(|(name, _)| *name == key)
            .and_then(|i| self.0[i].as_ref())
            .is_some_and(|v| !v.as_ref().trim().is_empty())
    }

    /// A comma-separated list of 1 to [`MAX_PROBES`] delays in ms, each from 1000 to `max`.
    fn delays(&self, key: &str, max: u64) -> Result<([u64; MAX_PROBES], usize), ConfigError> {
        let raw = self.value(key).unwrap_or_default();
        let mut ms = [0; MAX_PROBES];
        let mut len = 0;
        for part in raw.split(',') {
            let delay = part.trim().parse::<u64>().ok();
            match (delay.filter(|d| (1000..=max).contains(d)), ms.get_mut(len)) {
                (Some(d), Some(slot)) => *slot = d,
                _ => return Err(self.bad_delays(key, "1 to 8 delays", max)),
            }
            len += 1;
        }
        Ok((ms, len))
    }

    fn bad_delays(&self, key: &str, count: &str, max: u64) -> ConfigError {
        let raw = self.value(key).unwrap_or_default();
        ConfigError {
            key: key.to_owned(),
            problem: format!(
                "expected {count} in ms separated by commas, each from 1000 to {max}; got {}",
                crate::error::quoted(raw)
            ),
        }
    }

    /// A sealing key: 64 hex digits (32 bytes), or unset.
    fn seal_key(&self, key: &str) -> Result<Option<SealKey>, ConfigError> {
        let Some(text) = self.value(key) else {
            return Ok(None);
        };
        SealKey::parse(text).map(Some).ok_or_else(|| ConfigError {
            key: key.to_owned(),
            // Never the value: it is a key.
            problem: "expected 64 hex digits (32 bytes, e.g. from openssl rand -hex 32)".to_owned(),
        })
    }

    fn alert_url(&self) -> Result<Option<String>, ConfigError> {
        let Some(url) = self.value("alert_url") else {
            return Ok(None);
        };
        let any = crate::validate::TargetPolicy {
            allow_http: true,
            allow_private: true,
        };
        crate::validate::target_url(url, any).map_err(|_| ConfigError {
            key: "alert_url".to_owned(),
            problem: "expected an absolute http(s) URL".to_owned(),
        })?;
        Ok(Some(url.to_owned()))
    }

    /// Alerts are signed: a secret of at least 24 characters, required with `alert_url`.
    fn alert_secret(&self) -> Result<Option<String>, ConfigError> {
        let problem = match (self.value("alert_url"), self.value("alert_secret")) {
            (_, Some(secret)) if secret.chars().count() >= 24 => {
                return Ok(Some(secret.to_owned()));
            }
            (None, None) => return Ok(None),
            (_, Some(_)) => "expected at least 24 characters",
            (Some(_), None) => "required with alert_url (alerts are signed)",
        };
        Err(ConfigError {
            key: "alert_secret".to_owned(),
            problem: problem.to_owned(),
        })
    }
}

impl Settings {
    /// The delivery targets these settings allow (`allow_http`, `allow_private_targets`).
    pub fn target_policy(&self) -> crate::validate::TargetPolicy {
        crate::validate::TargetPolicy {
            allow_http: self.allow_http,
            allow_private: self.allow_private_targets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alert_url_needs_a_secret_and_both_are_checked() {
        let parse = |pairs: &[(&str, &str)]| Settings::from_pairs(pairs.iter().copied());
        let s = Settings::default();
        assert_eq!((s.alert_url, s.alert_secret), (None, None));
        let secret = "whsec_0123456789abcdefghijkl";
        let s = parse(&[
            ("alert_url", "https://ops.example.com/hook"),
            ("alert_secret", secret),
        ])
        .expect("parses");
        assert_eq!(s.alert_url.as_deref(), Some("https://ops.example.com/hook"));
        assert!(
            !format!("{s:?}").contains(secret),
            "the secret is never printed"
        );
        for (pairs, key) in [
            (
                &[("alert_url", "https://ops.example.com/hook")][..],
                "alert_secret",
            ),
            (
                &[("alert_url", "ops.example.com"), ("alert_secret", secret)],
                "alert_url",
            ),
            (
                &[
                    ("alert_url", "https://ops.example.com/h"),
                    ("alert_secret", "short"),
                ],
                "alert_secret",
            ),
        ] {
            assert_eq!(parse(pairs).expect_err("refused").key, key, "{pairs:?}");
        }
    }

    #[test]
    fn defaults_follow_the_design() {
        let s = Settings::default();
        assert_eq!(s.admin_token, None);
        assert_eq!(s.attempt_timeout_ms, 10_000);
        assert_eq!(s.max_concurrency, 16);
        assert_eq!(s.disable_after_failures, 5);
        assert_eq!(s.retention_days, 30);
        assert_eq!(s.subscription_limit, 100);
        assert!(!s.allow_private_targets);
        assert!(!s.allow_http);
        assert_eq!(s.target_policy(), crate::validate::TargetPolicy::STRICT);
        assert_eq!(s.rate_limit_per_minute, 1200);
    }

    #[test]
    fn the_configuration_table_of_docs_design_configuration_md_is_these_keys_and_defaults() {
        let doc = include_str!("../../../docs/design/configuration.md");
        let rows: Vec<(&str, &str)> = doc
            .lines()
            .filter_map(|l| {
                let mut cells = l.strip_prefix("| `")?.splitn(3, " | ");
                let key = cells.next()?.strip_suffix('`')?;
                Some((key, cells.next()?))
            })
            .collect();
        let expected: Vec<(&str, &str)> =
            KEYS.iter().map(|(k, d)| (*k, d.unwrap_or("—"))).collect();
        assert_eq!(rows, expected);
    }

    #[test]
    fn given_values_override_defaults() {
        let s = Settings::from_pairs([
            ("attempt_timeout_ms", "2500"),
            ("admin_token", "t0k"),
            ("allow_private_targets", "true"),
            ("something_else", "ignored"),
        ])
        .expect("valid");
        assert_eq!(s.attempt_timeout_ms, 2500);
        assert_eq!(s.admin_token.as_deref(), Some("t0k"));
        assert!(s.allow_private_targets);
        assert!(!s.allow_http, "each switch is its own");
        let s = Settings::from_pairs([("allow_http", "yes")]).expect("valid");
        assert!(s.allow_http && !s.allow_private_targets);
    }

    #[test]
    fn the_last_value_given_wins_trimmed_and_an_empty_one_is_the_default() {
        let s = Settings::from_pairs([
            ("retention_days", "7"),
            ("retention_days", " 9 "),
            ("subscription_limit", "  "),
            ("admin_token", ""),
        ])
        .expect("valid");
        assert_eq!(s.retention_days, 9);
        assert_eq!(s.subscription_limit, 100);
        assert_eq!(s.admin_token, None);
    }

    #[test]
    fn bad_values_are_errors_naming_the_key() {
        let err = Settings::from_pairs([("max_concurrency", "lots")]).expect_err("invalid");
        assert_eq!(err.key, "max_concurrency");
        let err = Settings::from_pairs([("attempt_timeout_ms", "0")]).expect_err("out of range");
        assert_eq!(err.key, "attempt_timeout_ms");
    }

    #[test]
    fn the_seal_keys_are_64_hex_digits_never_shown() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let s = Settings::from_pairs([("seal_key", hex)]).expect("valid");
        assert_eq!(s.seal.current, SealKey::parse(hex));
        assert_eq!(s.seal.previous, None);
        assert!(!format!("{s:?}").contains("00112233"));
        assert_eq!(Settings::default().seal, SealKeys::default());
        for key in ["seal_key", "seal_previous_key"] {
            let err = Settings::from_pairs([(key, &hex[1..])]).expect_err("short");
            assert_eq!(err.key, key);
            assert!(!err.problem.contains(&hex[1..9]), "{}", err.problem);
        }
    }

    #[test]
    fn recover_delays_are_one_to_eight_delays_of_a_second_to_a_week() {
        assert_eq!(Settings::default().recover_delays_ms, ProbeDelays::DEFAULT);
        let text = KEYS.iter().find(|(k, _)| *k == "recover_delays_ms");
        let text = text.and_then(|(_, d)| *d).expect("a default");
        let parsed = Settings::from_pairs([("recover_delays_ms", text)]).expect("parses");
        assert_eq!(
            parsed.recover_delays_ms,
            ProbeDelays::DEFAULT,
            "the default's text"
        );
        let s = Settings::from_pairs([("recover_delays_ms", " 1000, 604800000 ")]).expect("valid");
        assert_eq!(s.recover_delays_ms.as_slice(), [1000, 604_800_000]);
        assert_eq!(s.recover_delays_ms.before_probe(2), Some(604_800_000));
        assert_eq!(s.recover_delays_ms.before_probe(3), None);
        assert_eq!(s.recover_delays_ms.before_probe(0), None);
        let eight = "1000,1000,1000,1000,1000,1000,1000,1000";
        let s = Settings::from_pairs([("recover_delays_ms", eight)]).expect("eight");
        assert_eq!(s.recover_delays_ms.as_slice().len(), MAX_PROBES);
        for bad in [
            "999",
            "604800001",
            "1000,",
            "1000,x",
            "1000,1000,1000,1000,1000,1000,1000,1000,1000",
        ] {
            let err = Settings::from_pairs([("recover_delays_ms", bad)]).expect_err(bad);
            assert_eq!(err.key, "recover_delays_ms");
            assert!(err.problem.contains(&format!("{bad:?}")), "{}", err.problem);
        }
        let err = Settings::from_pairs([("retry_delays_ms", "60000,x,300000")]).expect_err("x");
        assert_eq!(
            err.key, "retry_delays_ms",
            "a part that does not parse is an error"
        );
    }

    #[test]
    fn debug_never_shows_the_admin_token() {
        let s = Settings::from_pairs([("admin_token", "very-secret")]).expect("valid");
        assert!(!format!("{s:?}").contains("very-secret"));
    }
}
