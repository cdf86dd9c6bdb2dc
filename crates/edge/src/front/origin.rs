//! The `Origin` allowlist of WebSocket upgrades (`allowed_origins`).
//!
//! Browsers send `Origin` with every WebSocket handshake and page scripts cannot change it, so
//! the list stops other sites' pages from opening sockets with a visitor's ambient credentials
//! (cookies are not used by Skua, but tokens kept by a page's origin are the point). Non-browser
//! clients send no `Origin` and are never refused for it.

pub(crate) use crate::config::OriginPattern;

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
