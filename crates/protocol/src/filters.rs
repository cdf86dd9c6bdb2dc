//! Filter validation and normalisation (docs/protocol.md N12, N13, N32).
//!
//! A subscription's filter list mixes OR strings (used verbatim) and AND groups (lists of at
//! least two strings, normalised to one key: members lowercased, sorted, joined with `|`).
//! A publish carries either one `filter` string (verbatim) or a `filters` array (normalised
//! like an AND group, one member allowed).

use crate::msgpack::{Kind, Reader};

/// Most filter entries one subscription or publish may carry.
pub const MAX_FILTERS: usize = 100;

/// Longest filter value in bytes; longer is `filter_too_long` (a filter key is forwarded in
/// every `message`, so it is bounded like every other echoed field).
pub const MAX_FILTER_BYTES: usize = 256;

/// Longest filter list (`filters` of subscribe/setFilters, as packed msgpack); longer is
/// `filter_too_long`. The list is echoed in `filtersUpdated` and `restoredSubscriptions`.
pub const MAX_FILTER_LIST_BYTES: usize = 32 * 1024;

/// Characters no filter value may contain (they structure internal topics and AND keys).
pub const RESERVED_CHARS: [char; 4] = ['/', '#', '+', '|'];

/// Why a filter list was refused. Each maps to one exact error string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// `too_many_filters (max 100)`.
    #[error("too_many_filters (max 100)")]
    TooMany,
    /// `invalid_filter_chars (/, #, +, | not allowed)`.
    #[error("invalid_filter_chars (/, #, +, | not allowed)")]
    InvalidChars,
    /// `filter_too_long (max 256 bytes per value, 32768 per list)` (Skua addition).
    #[error("filter_too_long (max 256 bytes per value, 32768 per list)")]
    TooLong,
}

impl FilterError {
    /// The exact `error` string of the error frame.
    pub fn as_wire_str(self) -> &'static str {
        match self {
            Self::TooMany => crate::codes::error::TOO_MANY_FILTERS,
            Self::InvalidChars => crate::codes::error::INVALID_FILTER_CHARS,
            Self::TooLong => crate::codes::error::FILTER_TOO_LONG,
        }
    }
}

/// One entry of a subscription's filter list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterSpec {
    /// An OR string, matched verbatim.
    Or(String),
    /// An AND group, already normalised to its key.
    And(String),
}

impl FilterSpec {
    /// The delivery key this entry matches.
    pub fn key(&self) -> &str {
        match self {
            Self::Or(s) | Self::And(s) => s,
        }
    }
}

/// Whether `s` is a valid filter value: non-empty, without reserved characters.
pub fn is_valid_value(s: &str) -> bool {
    !s.is_empty() && !s.contains(RESERVED_CHARS)
}

/// A value's length, then its characters.
fn check_value(s: &str) -> Result<(), FilterError> {
    if s.len() > MAX_FILTER_BYTES {
        Err(FilterError::TooLong)
    } else if is_valid_value(s) {
        Ok(())
    } else {
        Err(FilterError::InvalidChars)
    }
}

/// Normalises AND members: lowercased, sorted, joined with `|`.
pub fn and_key<'a>(members: impl IntoIterator<Item = &'a str>) -> String {
    let mut v: Vec<String> = members.into_iter().map(str::to_lowercase).collect();
    v.sort_unstable();
    v.join("|")
}

/// Parses a subscription filter list (`subscribe.filters`, `setFilters.filters`) from one
/// msgpack value. `nil` and `[]` mean wildcard (N32).
///
/// # Errors
/// [`FilterError`] as N12 lists.
pub fn parse_subscription_filters(raw: &[u8]) -> Result<Vec<FilterSpec>, FilterError> {
    if raw.len() > MAX_FILTER_LIST_BYTES {
        return Err(FilterError::TooLong);
    }
    let mut r = Reader::new(raw);
    if r.read_nil().map_err(|_| FilterError::InvalidChars)? {
        return Ok(Vec::new());
    }
    let n = r.read_array_len().map_err(|_| FilterError::InvalidChars)?;
    if n > MAX_FILTERS {
        return Err(FilterError::TooMany);
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        match r.peek_kind().map_err(|_| FilterError::InvalidChars)? {
            Kind::Str => {
                let s = r.read_str().map_err(|_| FilterError::InvalidChars)?;
                check_value(s)?;
                out.push(FilterSpec::Or(s.to_owned()));
            }
            Kind::Array => {
                let m = r.read_array_len().map_err(|_| FilterError::InvalidChars)?;
                if m < 2 {
                    return Err(FilterError::InvalidChars);
                }
                if m > MAX_FILTERS {
                    return Err(FilterError::TooMany);
                }
                let members = read_valid_strs(&mut r, m)?;
                out.push(FilterSpec::And(and_key(members)));
            }
            _ => return Err(FilterError::InvalidChars),
        }
    }
    Ok(out)
}

fn read_valid_strs<'a>(r: &mut Reader<'a>, n: usize) -> Result<Vec<&'a str>, FilterError> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let s = r.read_str().map_err(|_| FilterError::InvalidChars)?;
        check_value(s)?;
        v.push(s);
    }
    Ok(v)
}

/// Computes a publish's filter key from its `filter` and `filters` fields (raw msgpack values,
/// when present). `filter` wins when both are given; `nil` counts as absent; `filters: []`
/// publishes unfiltered.
///
/// # Errors
/// [`FilterError`] as N12 and N32 list.
pub fn parse_publish_filter(filter: Option<&[u8]>, filters: Option<&[u8]>) -> Result<Option<String>, FilterError> {
    if let Some(raw) = filter {
        let mut r = Reader::new(raw);
        if !r.read_nil().map_err(|_| FilterError::InvalidChars)? {
            let s = r.read_str().map_err(|_| FilterError::InvalidChars)?;
            check_value(s)?;
            return Ok(Some(s.to_owned()));
        }
    }
    let Some(raw) = filters else { return Ok(None) };
    let mut r = Reader::new(raw);
    if r.read_nil().map_err(|_| FilterError::InvalidChars)? {
        return Ok(None);
    }
    let n = r.read_array_len().map_err(|_| FilterError::InvalidChars)?;
    if n > MAX_FILTERS {
        return Err(FilterError::TooMany);
    }
    if n == 0 {
        return Ok(None);
    }
    let members = read_valid_strs(&mut r, n)?;
    Ok(Some(and_key(members)))
}

/// A server-side publish's filter key, given as a plain string (empty: none), checked as a
/// `publish` frame's `filter` is.
///
/// # Errors
/// [`FilterError`] as N12 lists.
pub fn publish_filter_key(filter: &str) -> Result<Option<String>, FilterError> {
    if filter.is_empty() {
        return Ok(None);
    }
    check_value(filter)?;
    Ok(Some(filter.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_publish_filter_is_checked_like_a_frames() {
        assert_eq!(publish_filter_key(""), Ok(None));
        assert_eq!(publish_filter_key("vip"), Ok(Some("vip".into())));
        assert_eq!(publish_filter_key("a/b"), Err(FilterError::InvalidChars));
        assert_eq!(publish_filter_key(&"x".repeat(257)), Err(FilterError::TooLong));
    }
    use crate::msgpack::Writer;

    fn strs(v: &[&str]) -> Vec<u8> {
        let mut w = Writer::default();
        w.array(v.len());
        for s in v {
            w.str(s);
        }
        w.into_vec()
    }

    #[test]
    fn or_strings_are_verbatim_and_groups_normalise() {
        let mut w = Writer::default();
        w.array(2).str("User_1").array(2).str("Tier:Gold").str("region:EU");
        let f = parse_subscription_filters(&w.into_vec()).unwrap();
        assert_eq!(f, vec![FilterSpec::Or("User_1".into()), FilterSpec::And("region:eu|tier:gold".into())]);
    }

    #[test]
    fn subscription_filter_errors() {
        assert_eq!(parse_subscription_filters(&[0xc0]), Ok(vec![]));
        assert_eq!(parse_subscription_filters(&[0x90]), Ok(vec![]));
        assert_eq!(parse_subscription_filters(&strs(&[""])), Err(FilterError::InvalidChars));
        for bad in ["a/b", "a#", "+", "x|y"] {
            assert_eq!(parse_subscription_filters(&strs(&[bad])), Err(FilterError::InvalidChars), "{bad}");
        }
        // one-member AND group, non-string member, non-list
        assert_eq!(parse_subscription_filters(&[0x91, 0x91, 0xa1, b'a']), Err(FilterError::InvalidChars));
        assert_eq!(parse_subscription_filters(&[0x91, 0x05]), Err(FilterError::InvalidChars));
        assert_eq!(parse_subscription_filters(&[0xa1, b'a']), Err(FilterError::InvalidChars));
        let many: Vec<String> = (0..101).map(|i| format!("f{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(parse_subscription_filters(&strs(&many)), Err(FilterError::TooMany));
        assert_eq!(parse_subscription_filters(&strs(&many[..100])).map(|v| v.len()), Ok(100));
    }

    #[test]
    fn publish_filter_rules() {
        let one = {
            let mut w = Writer::default();
            w.str("Region:US");
            w.into_vec()
        };
        assert_eq!(parse_publish_filter(Some(&one), None), Ok(Some("Region:US".into())));
        assert_eq!(parse_publish_filter(None, Some(&strs(&["B", "a"]))), Ok(Some("a|b".into())));
        assert_eq!(parse_publish_filter(None, Some(&strs(&["Solo"]))), Ok(Some("solo".into())));
        assert_eq!(parse_publish_filter(None, Some(&[0x90])), Ok(None));
        assert_eq!(parse_publish_filter(Some(&[0xc0]), None), Ok(None));
        assert_eq!(parse_publish_filter(Some(&[0xa0]), None), Err(FilterError::InvalidChars));
        assert_eq!(parse_publish_filter(None, Some(&[0x91, 0x01])), Err(FilterError::InvalidChars));
        assert_eq!(parse_publish_filter(None, Some(&[0xa1, b'a'])), Err(FilterError::InvalidChars));
    }
}
