//! Input checks shared by every RPC: each failure is an `INVALID_ARGUMENT` naming the field.

use crate::service::Error;
use skua_core::ids::is_slug;

/// Longest display name.
pub const MAX_NAME_LEN: usize = 256;
/// Longest JWT secret.
pub const MAX_SECRET_LEN: usize = 512;
/// Longest webhook URL.
pub const MAX_URL_LEN: usize = 2048;
/// Most topics per app.
pub const MAX_TOPICS_PER_APP: usize = 256;
/// Most webhook events per topic.
pub const MAX_WEBHOOK_EVENTS: usize = 32;
/// Most rooms in a lobby.
pub const MAX_LOBBY_ROOMS: usize = 1000;
/// Most entries in a lobby's allow lists, or a grant's topic subset.
pub const MAX_LIST_LEN: usize = 256;
/// Longest `description` of an app, room or actor, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 1024;
/// Longest `externalId` of an app, room or actor, in bytes.
pub const MAX_EXTERNAL_ID_BYTES: usize = 256;
/// Largest `metadata` (of an app, room, actor or grant) as compact JSON, in bytes.
pub const MAX_METADATA_BYTES: usize = 16_384;
/// Longest grant `role`, in bytes.
pub const MAX_ROLE_BYTES: usize = 64;

/// At most 64 characters of `v`, for echoing bad input back safely.
fn echo(v: &str) -> String {
    let mut s: String = v.chars().take(64).collect();
    if s.len() < v.len() {
        s.push('…');
    }
    s
}

/// `v` must be a slug.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn slug(field: &str, v: &str) -> Result<(), Error> {
    if v.is_empty() {
        return Err(Error::invalid_argument(format!("{field} is required")));
    }
    if !is_slug(v) {
        return Err(Error::invalid_argument(format!(
            "{field} {:?} is invalid: use 1-64 letters, digits, '-' or '_'",
            echo(v)
        )));
    }
    Ok(())
}

/// `v` must be a display name (at most 256 characters, no control characters).
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn name(field: &str, v: &str) -> Result<(), Error> {
    if v.chars().count() > MAX_NAME_LEN {
        return Err(Error::invalid_argument(format!("{field} is longer than {MAX_NAME_LEN} characters")));
    }
    if v.chars().any(char::is_control) {
        return Err(Error::invalid_argument(format!("{field} contains control characters")));
    }
    Ok(())
}

/// `v` must be a description: at most [`MAX_DESCRIPTION_BYTES`], no control characters but
/// line breaks and tabs.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn description(field: &str, v: &str) -> Result<(), Error> {
    if v.len() > MAX_DESCRIPTION_BYTES {
        return Err(Error::invalid_argument(format!("{field} is longer than {MAX_DESCRIPTION_BYTES} bytes")));
    }
    if v.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
        return Err(Error::invalid_argument(format!("{field} contains control characters")));
    }
    Ok(())
}

/// `v` must be at most `max` bytes without control characters (`externalId`, `role`).
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn short_text(field: &str, v: &str, max: usize) -> Result<(), Error> {
    if v.len() > max {
        return Err(Error::invalid_argument(format!("{field} is longer than {max} bytes")));
    }
    if v.chars().any(char::is_control) {
        return Err(Error::invalid_argument(format!("{field} contains control characters")));
    }
    Ok(())
}

/// `v` must be a JSON object of at most [`MAX_METADATA_BYTES`] (as given: the REST API
/// gives compact JSON).
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn metadata(field: &str, v: &str) -> Result<(), Error> {
    if v.len() > MAX_METADATA_BYTES {
        return Err(Error::invalid_argument(format!("{field} is larger than {MAX_METADATA_BYTES} bytes as JSON")));
    }
    match serde_json::from_str::<serde_json::Value>(v) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        _ => Err(Error::invalid_argument(format!("{field} must be a JSON object"))),
    }
}

/// `items` must be slugs, each once, at most `max`.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn slug_list(field: &str, items: &[String], max: usize) -> Result<(), Error> {
    if items.len() > max {
        return Err(Error::invalid_argument(format!("{field} has {} entries; at most {max}", items.len())));
    }
    for (i, v) in items.iter().enumerate() {
        slug(field, v)?;
        if items[..i].contains(v) {
            return Err(Error::invalid_argument(format!("{field} lists {v:?} twice")));
        }
    }
    Ok(())
}

/// `v` must be an actor type.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn actor_type(field: &str, v: &str) -> Result<skua_core::ActorType, Error> {
    if v.is_empty() {
        return Err(Error::invalid_argument(format!("{field} is required")));
    }
    skua_core::ActorType::parse(v).map_err(|_| {
        Error::invalid_argument(format!(
            "{field} {:?} is invalid: one of user, device, agent, orchestrator, observer, server, service, session",
            echo(v)
        ))
    })
}

/// `v` must be a webhook URL.
///
/// # Errors
/// `INVALID_ARGUMENT`.
pub fn url(field: &str, v: &str) -> Result<(), Error> {
    if v.len() > MAX_URL_LEN {
        return Err(Error::invalid_argument(format!("{field} is longer than {MAX_URL_LEN} characters")));
    }
    let ok = (v.starts_with("http://") || v.starts_with("https://"))
        && v.len() > "https://".len()
        && !v.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok { Ok(()) } else { Err(Error::invalid_argument(format!("{field} {:?} is not an http(s) URL", echo(v)))) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_field() {
        assert_eq!(slug("slug", "").unwrap_err().message(), "slug is required");
        let e = slug("slug", "a b").unwrap_err();
        assert_eq!(e.code(), crate::service::Code::InvalidArgument);
        assert!(e.message().starts_with("slug \"a b\" is invalid"), "{}", e.message());
        assert!(slug_list("rooms", &["a".into(), "a".into()], 5).unwrap_err().message().contains("twice"));
        assert!(url("url", "ftp://x").is_err());
        assert!(url("url", "https://example.com/hook").is_ok());
        assert!(name("name", &"x".repeat(300)).is_err());
        assert!(actor_type("actor_type", "robot").unwrap_err().message().contains("one of user"));
    }
}
