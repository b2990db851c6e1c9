//! A client's notification endpoint (`notify:{endpoint id}`): registered, changed, read and
//! removed by its owner; its secret made here, sealed under the settings' current key for
//! its own record (and sealed again under it by a change), and shown once, when it is made.
//! Every client that registers one is listed in [`directory`], which the re-seal pass walks.

use crate::{ApiError, Env, Kv, Secret};
use edgehook_model::ids::ClientId;
use edgehook_records::notify::{NotificationEndpoint, endpoint_id};
use edgehook_storage::applog::AppendLog;
use edgehook_storage::keys;
use edgehook_storage::kv::{Update, update};

/// What [`put`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// The client had none: registered, with this secret (plain, shown once).
    Created(NotificationEndpoint, String),
    /// Its URL changed; the secret is the one it had.
    Changed(NotificationEndpoint),
}

/// Registers `client_id`'s notification endpoint at `url` (checked by the caller), or points
/// the one it has at `url`, keeping its secret.
pub fn put<K: Kv>(env: &Env<'_, K>, client_id: &ClientId, url: &str) -> Result<Put, ApiError> {
    let key = keys::notification_endpoint(&endpoint_id(client_id));
    // Listed before the record is written, so that every record is listed (the re-seal pass
    // walks the list); a registration cut short leaves an entry that finds no record.
    if env.kv.get(&key)?.is_none() {
        directory().append(env.kv, &[client_id.as_bytes()])?;
    }
    let fresh = Secret::generate(env.random_bytes());
    let plain = fresh.plain().unwrap_or_default().to_owned();
    let seal = &env.settings.seal;
    let stored = match seal.current {
        None => fresh,
        Some(_) => fresh.sealed(seal, env.random_bytes(), &key),
    };
    let now = env.now_ms;
    update(env.kv, &key, &mut |cur| {
        let endpoint = match cur.map(NotificationEndpoint::decode) {
            Some(Some(mut was)) => {
                was.url = url.to_owned();
                was.updated_at = now;
                // Written anyway: sealed under the current key if it is not yet.
                if let Ok(Some(resealed)) = was.secret.resealed(seal, env.random_bytes(), &key) {
                    was.secret = resealed;
                }
                return Ok(Update::Write(was.encode(), Put::Changed(was)));
            }
            Some(None) => return Err(ApiError::internal("notification endpoint unreadable")),
            None => NotificationEndpoint {
                client_id: client_id.clone(),
                url: url.to_owned(),
                secret: stored.clone(),
                created_at: now,
                updated_at: now,
            },
        };
        Ok(Update::Write(
            endpoint.encode(),
            Put::Created(endpoint, plain.clone()),
        ))
    })
    .map_err(Into::into)
}

/// The clients that registered a notification endpoint, in the order they did (an entry
/// stays after a removal, and a client that registers again is listed again).
pub fn directory() -> AppendLog {
    AppendLog::new(keys::NOTIFY_DIRECTORY)
}

/// `client_id`'s notification endpoint, if it registered one.
pub fn load<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
) -> Result<Option<NotificationEndpoint>, ApiError> {
    let key = keys::notification_endpoint(&endpoint_id(client_id));
    match env.kv.get(&key)? {
        None => Ok(None),
        Some(bytes) => NotificationEndpoint::decode(&bytes)
            .map(Some)
            .ok_or_else(|| ApiError::internal("notification endpoint unreadable")),
    }
}

/// Removes `client_id`'s notification endpoint; whether it had one. Notices still queued
/// for it are cancelled when they come due.
pub fn remove<K: Kv>(env: &Env<'_, K>, client_id: &ClientId) -> Result<bool, ApiError> {
    let key = keys::notification_endpoint(&endpoint_id(client_id));
    let had = env.kv.get(&key)?.is_some();
    if had {
        env.kv.delete(&key)?;
    }
    Ok(had)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgehook_model::config::Settings;
    use edgehook_model::env::SeededEntropy;
    use edgehook_model::seal::{SealKey, SealKeys};
    use edgehook_storage::kv::MemoryKv;

    #[test]
    fn the_secret_is_shown_once_kept_on_a_change_and_sealed_for_its_record() {
        let kv = MemoryKv::default();
        let settings = Settings {
            seal: SealKeys {
                current: Some(SealKey::new([9; 32])),
                previous: None,
            },
            ..Settings::default()
        };
        let entropy = SeededEntropy::new(1);
        let env = Env::new(1_000, &kv, &settings, &entropy);
        let acme = ClientId::from("acme");
        let Put::Created(made, secret) = put(&env, &acme, "https://a.example/n").expect("put")
        else {
            panic!("created")
        };
        assert!(secret.starts_with("whsec_"));
        let key = keys::notification_endpoint(&endpoint_id(&acme));
        let stored = kv.get(&key).expect("get").expect("stored");
        assert!(!stored.windows(12).any(|w| w == &secret.as_bytes()[6..18]));
        assert_eq!(
            made.secret.open(&settings.seal, &key).as_deref(),
            Ok(secret.as_str())
        );
        let env = env.at(2_000);
        let Put::Changed(changed) = put(&env, &acme, "https://b.example/n").expect("put") else {
            panic!("changed")
        };
        assert_eq!((changed.secret, changed.updated_at), (made.secret, 2_000));
        assert_eq!(
            load(&env, &acme).expect("load").map(|e| e.url),
            Some("https://b.example/n".to_owned())
        );
        assert_eq!(load(&env, &ClientId::from("other")).expect("load"), None);
        assert!(remove(&env, &acme).expect("remove"));
        assert!(!remove(&env, &acme).expect("remove"));
        assert_eq!(load(&env, &acme).expect("load"), None);
    }
}
