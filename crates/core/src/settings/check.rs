//! The rules a setting's value is checked with, each naming the key it refuses: the owning
//! crate writes one line per setting, next to its declaration, with these (and any rule
//! between settings after them).

use std::time::Duration;

/// A setting's key (its field name) with its value, as the rules take it ([`setting!`](crate::setting!)).
pub type Key<'a, T> = (&'static str, Option<&'a T>);

/// A value that parses but is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {key}: {reason}")]
pub struct SettingError {
    /// The setting (its TOML key).
    pub key: &'static str,
    /// Why.
    pub reason: String,
}

/// The refusal of `key` for `reason`.
pub fn invalid(key: &'static str, reason: impl Into<String>) -> SettingError {
    SettingError { key, reason: reason.into() }
}

/// A setting the compiled-in defaults always give.
///
/// # Errors
/// When the setting is not set.
pub fn required<T: Clone>((key, v): Key<'_, T>) -> Result<T, SettingError> {
    v.cloned().ok_or_else(|| invalid(key, "missing"))
}

/// A duration (`500ms`, `5s`, `10m`, `2h`, `1d`).
///
/// # Errors
/// When it does not parse.
pub fn duration((key, v): Key<'_, String>) -> Result<Duration, SettingError> {
    let v = required((key, v))?;
    crate::duration::parse(&v).map_err(|reason| invalid(key, reason))
}

/// A duration above zero.
///
/// # Errors
/// When it does not parse or is zero.
pub fn nonzero_duration(k: Key<'_, String>) -> Result<Duration, SettingError> {
    let d = duration(k)?;
    if d.is_zero() { Err(invalid(k.0, "must be above 0")) } else { Ok(d) }
}

/// A duration of at most `max` (0 allowed).
///
/// # Errors
/// When it does not parse or is above `max`.
pub fn at_most(k: Key<'_, String>, max: Duration) -> Result<Duration, SettingError> {
    let d = duration(k)?;
    if d > max { Err(invalid(k.0, format!("must be at most {}ms", max.as_millis()))) } else { Ok(d) }
}

/// A count of at least 1.
///
/// # Errors
/// When it is 0.
pub fn positive<T: Copy + Default + PartialEq>(k: Key<'_, T>) -> Result<T, SettingError> {
    let v = required(k)?;
    if v == T::default() { Err(invalid(k.0, "must be at least 1")) } else { Ok(v) }
}

/// A count in `min..=max`.
///
/// # Errors
/// When it is outside.
pub fn between<T: Copy + PartialOrd + std::fmt::Display>(k: Key<'_, T>, min: T, max: T) -> Result<T, SettingError> {
    let v = required(k)?;
    if v < min || v > max { Err(invalid(k.0, format!("{v}: must be between {min} and {max}"))) } else { Ok(v) }
}

/// A socket address (`0.0.0.0:8883`); empty (or unset) is `None`: off.
///
/// # Errors
/// When it does not parse.
pub fn optional_address((key, v): Key<'_, String>) -> Result<Option<std::net::SocketAddr>, SettingError> {
    match v.map(String::as_str) {
        None | Some("") => Ok(None),
        Some(a) => a.parse().map(Some).map_err(|e| invalid(key, format!("{a:?}: {e}"))),
    }
}

/// Each entry of a list, parsed with `parse`.
///
/// # Errors
/// The first entry `parse` refuses.
pub fn each<T>((key, v): Key<'_, Vec<String>>, parse: fn(&str) -> Result<T, String>) -> Result<Vec<T>, SettingError> {
    required((key, v))?.iter().map(|x| parse(x)).collect::<Result<_, _>>().map_err(|reason| invalid(key, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_names_its_key_and_says_why() {
        let zero = String::from("0s");
        assert_eq!(nonzero_duration(("a", Some(&zero))), Err(invalid("a", "must be above 0")));
        assert_eq!(positive(("b", Some(&0u32))), Err(invalid("b", "must be at least 1")));
        assert_eq!(between(("c", Some(&9u16)), 1, 8), Err(invalid("c", "9: must be between 1 and 8")));
        assert_eq!(required::<u32>(("d", None)), Err(invalid("d", "missing")));
        let (empty, addr, bad) = (String::new(), String::from("127.0.0.1:8883"), String::from("8883"));
        assert_eq!(optional_address(("g", Some(&empty))), Ok(None));
        assert_eq!(optional_address(("g", Some(&addr))), Ok(Some(([127, 0, 0, 1], 8883).into())));
        assert_eq!(optional_address(("g", Some(&bad))).unwrap_err().key, "g");
        let long = String::from("2s");
        assert_eq!(at_most(("e", Some(&long)), Duration::from_secs(1)), Err(invalid("e", "must be at most 1000ms")));
        assert_eq!(
            invalid("f", "why").to_string(),
            "invalid setting f: why",
            "the words of the server's ConfigError::Invalid"
        );
    }
}
