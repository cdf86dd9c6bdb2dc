//! Placeholder secrets (issue 23, item 6): outside `--dev`, `skua serve` refuses to start with a
//! secret that is a placeholder left from a template (`CHANGE-ME…`, `changeme`, `replace-me`,
//! `<…>`), a well-known development value (`skua-dev-…`), one character repeated, or too short,
//! so that a forgotten placeholder never becomes a public admin key.
//!
//! Checked: `admin_key`, `metrics_token`, the passwords in the `bus`, `presence` and `store`
//! URLs, and, in the fixtures file, each project's `jwt_secret` and each app's
//! `webhook_secret`. Lengths: keys and secrets at least [`MIN_SECRET_LEN`] bytes (URL passwords
//! are only checked for placeholders: the backend decides their strength).

use skua_core::RegistryData;

use super::{BusConfig, ConfigError, PresenceConfig, ServerConfig, StoreConfig};

/// Fewest bytes of an admin key, metrics token, JWT secret or webhook secret outside `--dev`.
pub const MIN_SECRET_LEN: usize = 16;

/// Words that mark a template's placeholder, compared without case, `-`, `_`, `.` or spaces.
const PLACEHOLDER_WORDS: &[&str] = &["changeme", "replaceme", "placeholder", "yoursecret", "insertsecret", "fixme"];

/// Why `value` is a placeholder, or `None` when it may be a real secret.
pub fn placeholder_reason(value: &str) -> Option<&'static str> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Some("it is empty");
    }
    let folded: String =
        trimmed.chars().filter(|c| !matches!(c, '-' | '_' | '.' | ' ')).flat_map(char::to_lowercase).collect();
    if PLACEHOLDER_WORDS.iter().any(|w| folded.contains(w)) {
        return Some("it is a placeholder (CHANGE-ME, changeme, replace-me, …)");
    }
    if trimmed.starts_with('<') && trimmed.ends_with('>') {
        return Some("it is a placeholder (<…>)");
    }
    if folded.starts_with("skuadev") {
        return Some("it is one of --dev's well-known values (skua-dev-…)");
    }
    let mut chars = trimmed.chars();
    if let Some(first) = chars.next()
        && trimmed.chars().count() > 1
        && chars.all(|c| c == first)
    {
        return Some("it is one character repeated");
    }
    None
}

/// `placeholder_reason`, plus too short.
fn secret_reason(value: &str) -> Option<String> {
    if let Some(r) = placeholder_reason(value) {
        return Some(r.to_owned());
    }
    (value.len() < MIN_SECRET_LEN).then(|| format!("it is shorter than {MIN_SECRET_LEN} bytes"))
}

/// The password of `scheme://user:password@host…`, percent-decoding left aside.
fn url_password(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    userinfo.split_once(':').map(|(_, p)| p)
}

/// The `password=` query parameter of a (Postgres) URL.
fn query_password(url: &str) -> Option<&str> {
    let query = &url[url.find('?')? + 1..];
    query
        .split('&')
        .find_map(|kv| kv.split_once('=').filter(|(k, _)| k.eq_ignore_ascii_case("password")).map(|(_, v)| v))
}

fn refuse(key: &'static str, what: &str, why: &str) -> ConfigError {
    ConfigError::Invalid {
        key,
        reason: format!("{what} is refused outside --dev: {why}; set a real secret (e.g. `openssl rand -hex 32`)"),
    }
}

/// Refuses placeholder secrets in `config` and `fixtures` (not called with `--dev`).
///
/// # Errors
/// [`ConfigError::Invalid`] naming the first setting (or fixture) that holds a placeholder.
pub fn check(config: &ServerConfig, fixtures: Option<&RegistryData>) -> Result<(), ConfigError> {
    if let Some(k) = &config.admin_key
        && let Some(why) = secret_reason(&k.0)
    {
        return Err(refuse("admin_key", "the admin key (SKUA_ADMIN_KEY)", &why));
    }
    if let Some(t) = &config.edge.metrics_token
        && let Some(why) = secret_reason(t.expose())
    {
        return Err(refuse("metrics_token", "the metrics token (SKUA_METRICS_TOKEN)", &why));
    }
    let urls: [(&'static str, &str, Option<&str>); 3] = [
        (
            "bus",
            "the password in SKUA_BUS",
            match &config.bus {
                BusConfig::Mqtt { url } => Some(url),
                BusConfig::Memory => None,
            },
        ),
        (
            "presence",
            "the password in SKUA_PRESENCE",
            match &config.presence {
                PresenceConfig::Redis { url } => Some(url),
                PresenceConfig::Memory => None,
            },
        ),
        (
            "store",
            "the password in SKUA_STORE",
            match &config.store {
                StoreConfig::Url(url) => Some(url),
                StoreConfig::Memory => None,
            },
        ),
    ];
    for (key, what, url) in urls {
        let Some(url) = url else { continue };
        for password in [url_password(url), query_password(url)].into_iter().flatten() {
            if !password.is_empty()
                && let Some(why) = placeholder_reason(password)
            {
                return Err(refuse(key, what, why));
            }
        }
    }
    let Some(data) = fixtures else { return Ok(()) };
    for p in data.projects.values() {
        if let Some(why) = p.jwt_secret.as_deref().and_then(secret_reason) {
            return Err(refuse("fixtures", &format!("project {}'s jwt_secret", p.id), &why));
        }
    }
    for a in data.apps.values() {
        if let Some(why) = a.webhook_secret.as_deref().and_then(secret_reason) {
            return Err(refuse("fixtures", &format!("app {}'s webhook_secret", a.slug), &why));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    #[test]
    fn placeholders_are_recognised_and_real_secrets_pass() {
        for p in [
            "",
            "   ",
            "CHANGE-ME-to-a-long-random-key",
            "changeme",
            "change_me_please_0123",
            "whsec_change-me",
            "Replace-Me-With-A-Key",
            "<your admin key>",
            "skua-dev-admin-key",
            "xxxxxxxxxxxxxxxxxxxx",
            "placeholder-secret-value",
        ] {
            assert!(placeholder_reason(p).is_some(), "{p:?} passed");
        }
        for real in ["hunter2", "a-very-secret-admin-key", "3f1c9e0b7a5d42e8b6c1f0a9d8e7c6b5", "x"] {
            assert!(placeholder_reason(real).is_none(), "{real:?} refused");
        }
        assert!(secret_reason("hunter2").is_some_and(|r| r.contains("shorter than 16")));
    }

    #[test]
    fn passwords_are_found_in_urls() {
        assert_eq!(url_password("postgres://skua:CHANGE-ME@db:5432/skua"), Some("CHANGE-ME"));
        assert_eq!(url_password("rediss://:pw@redis:6380/0"), Some("pw"));
        assert_eq!(url_password("mqtt://broker:1883"), None);
        assert_eq!(url_password("mqtt://user@broker:1883"), None);
        assert_eq!(query_password("postgres://db/skua?sslmode=require&password=changeme"), Some("changeme"));
    }

    fn config(s: &Settings) -> ServerConfig {
        ServerConfig::from_layers(&[s]).unwrap()
    }

    #[test]
    fn each_secret_setting_is_checked_and_names_its_key() {
        let key = |s: Settings| {
            check(&config(&s), None).err().map(|e| match e {
                ConfigError::Invalid { key, .. } => key,
                ConfigError::UnknownOrInvalid(_) => "?",
            })
        };
        assert_eq!(key(Settings::default()), None, "the defaults hold no secret");
        let real = "3f1c9e0b7a5d42e8b6c1f0a9d8e7c6b5";
        assert_eq!(
            key({
                let mut layer = Settings::default();
                layer.node.admin_key = Some(real.into());
                layer
            }),
            None
        );
        assert_eq!(
            key({
                let mut layer = Settings::default();
                layer.node.admin_key = Some("CHANGE-ME-to-a-long-random-key".into());
                layer
            }),
            Some("admin_key")
        );
        assert_eq!(
            key({
                let mut layer = Settings::default();
                layer.node.admin_key = Some("skua-dev-admin-key".into());
                layer
            }),
            Some("admin_key")
        );
        assert_eq!(
            key({
                let mut layer = Settings::default();
                layer.edge.metrics_token = Some("changeme-changeme-changeme".into());
                layer
            }),
            Some("metrics_token")
        );
        assert_eq!(
            key({
                let mut layer = Settings::default();
                layer.node.store = Some("postgres://skua:CHANGE-ME@db:5432/skua".into());
                layer
            }),
            Some("store")
        );
        assert_eq!(
            key({
                let mut layer = Settings::default();
                layer.node.bus = Some("mqtts://skua:CHANGE-ME@broker:8883".into());
                layer
            }),
            Some("bus")
        );
        assert_eq!(
            key({
                let mut layer = Settings::default();
                layer.node.presence = Some("rediss://skua:changeme@redis:6380/0".into());
                layer
            }),
            Some("presence")
        );
        assert_eq!(
            key({
                let mut layer = Settings::default();
                layer.node.store = Some("postgres://skua:hunter2@db/skua".into());
                layer
            }),
            None
        );
        let e = check(
            &config(&{
                let mut layer = Settings::default();
                layer.node.admin_key = Some("CHANGE-ME-to-a-long-random-key".into());
                layer
            }),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("SKUA_ADMIN_KEY") && e.contains("outside --dev") && !e.contains("CHANGE-ME-to"), "{e}");
    }

    #[test]
    fn fixture_secrets_are_checked() {
        let fixtures = |jwt: &str, webhook: &str| {
            let text = format!(
                "[[projects]]\nid = \"p1\"\njwt_secret = \"{jwt}\"\n[[projects.apps]]\nid = \"p1-a1\"\nslug = \"a1\"\n\
                 webhook_secret = \"{webhook}\"\n"
            );
            crate::fixtures::load_data(&[("test", &text)]).unwrap()
        };
        let c = config(&Settings::default());
        let real = "3f1c9e0b7a5d42e8b6c1f0a9d8e7c6b5";
        assert!(check(&c, Some(&fixtures(real, real))).is_ok());
        let e = check(&c, Some(&fixtures("change-me", real))).unwrap_err().to_string();
        assert!(e.contains("jwt_secret") && e.contains("p1"), "{e}");
        let e = check(&c, Some(&fixtures(real, "whsec_change-me"))).unwrap_err().to_string();
        assert!(e.contains("webhook_secret") && e.contains("a1"), "{e}");
        assert!(check(&c, Some(&fixtures(real, "short"))).is_err(), "too short");
    }
}
