//! Origin patterns of the WebSocket allowlist (`allowed_origins`).

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
