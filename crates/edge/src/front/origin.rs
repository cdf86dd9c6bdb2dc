//! The `Origin` allowlist of WebSocket upgrades (`allowed_origins`).
//!
//! Browsers send `Origin` with every WebSocket handshake and page scripts cannot change it, so
//! the list stops other sites' pages from opening sockets with a visitor's ambient credentials
//! (cookies are not used by Skua, but tokens kept by a page's origin are the point). Non-browser
//! clients send no `Origin` and are never refused for it.

/// One allowed origin: exactly `scheme://host[:port]`, or `scheme://*.domain[:port]` for every
/// subdomain of `domain` (at any depth, but not `domain` itself). Compared case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginPattern {
    scheme: String,
    /// The host, or for a wildcard the suffix starting with the dot (`.example.com`).
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl OriginPattern {
    /// Parses `https://app.example.com`, `http://localhost:3000` or `https://*.example.com`.
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(s: &str) -> Result<Self, String> {
        let o = parse_origin(s.trim())
            .ok_or_else(|| format!("{s:?}: use scheme://host[:port] or scheme://*.domain[:port], with no path"))?;
        let (host, wildcard) = match o.host.strip_prefix("*.") {
            Some(rest) if !rest.is_empty() && !rest.contains('*') => (format!(".{rest}"), true),
            Some(_) => return Err(format!("{s:?}: a wildcard needs a domain after \"*.\"")),
            None if o.host.contains('*') => return Err(format!("{s:?}: \"*\" is only allowed as \"*.domain\"")),
            None => (o.host, false),
        };
        Ok(Self { scheme: o.scheme, host, wildcard, port: o.port })
    }

    /// Whether the `Origin` header value `origin` matches.
    pub fn matches(&self, origin: &str) -> bool {
        let Some(o) = parse_origin(origin) else { return false };
        if o.scheme != self.scheme || o.port != self.port {
            return false;
        }
        if self.wildcard { o.host.len() > self.host.len() && o.host.ends_with(&self.host) } else { o.host == self.host }
    }
}

impl std::fmt::Display for OriginPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let star = if self.wildcard { "*" } else { "" };
        write!(f, "{}://{star}{}", self.scheme, self.host)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// Whether a WebSocket upgrade with `origin` (the header, if sent) passes `allowed`: every
/// origin passes an empty list, and a request without the header always passes.
pub(crate) fn allowed(allowed: &[OriginPattern], origin: Option<&[u8]>) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let Some(origin) = origin else { return true };
    let Ok(origin) = std::str::from_utf8(origin) else { return false };
    allowed.iter().any(|p| p.matches(origin))
}

struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

/// `scheme://host[:port]`, lowercased, with the scheme's default port dropped; `None` for
/// anything else (`null`, paths, user info, an empty host).
fn parse_origin(s: &str) -> Option<Origin> {
    let (scheme, rest) = s.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) {
        return None;
    }
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{h}]"), port)
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (rest.to_owned(), None),
        }
    };
    if host.is_empty() || host.contains(':') && !host.starts_with('[') {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) => Some(p.parse::<u16>().ok()?),
    };
    let default = match scheme.as_str() {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    };
    let port = port.filter(|p| Some(*p) != default);
    Some(Origin { scheme, host: host.to_ascii_lowercase(), port })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &[&str]) -> Vec<OriginPattern> {
        s.iter().map(|p| OriginPattern::parse(p).unwrap()).collect()
    }

    #[test]
    fn exact_origins_match_scheme_host_and_port() {
        let l = list(&["https://app.example.com", "http://localhost:3000"]);
        assert!(allowed(&l, Some(b"https://app.example.com")));
        assert!(allowed(&l, Some(b"HTTPS://App.Example.com:443")), "case and default port");
        assert!(allowed(&l, Some(b"http://localhost:3000")));
        assert!(!allowed(&l, Some(b"http://app.example.com")), "scheme");
        assert!(!allowed(&l, Some(b"https://app.example.com:8443")), "port");
        assert!(!allowed(&l, Some(b"http://localhost")), "port");
        assert!(!allowed(&l, Some(b"https://evil.com")));
        assert!(!allowed(&l, Some(b"https://app.example.com.evil.com")));
        assert!(!allowed(&l, Some(b"null")));
        assert!(!allowed(&l, Some(b"\xff\xfe")));
        assert!(allowed(&l, None), "no Origin: not a browser");
        assert!(allowed(&[], Some(b"https://evil.com")), "empty list allows all");
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let l = list(&["https://*.example.com"]);
        assert!(allowed(&l, Some(b"https://a.example.com")));
        assert!(allowed(&l, Some(b"https://a.b.example.com")));
        assert!(!allowed(&l, Some(b"https://example.com")));
        assert!(!allowed(&l, Some(b"https://badexample.com")));
        assert!(!allowed(&l, Some(b"http://a.example.com")));
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in
            ["example.com", "https://", "https://a.com/path", "https://*", "https://a.*.com", "https://a.com:x", "*"]
        {
            assert!(OriginPattern::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(OriginPattern::parse("https://*.Example.com:443").unwrap().to_string(), "https://*.example.com");
        assert!(OriginPattern::parse("http://[::1]:8080").unwrap().matches("http://[::1]:8080"));
    }
}
