//! Plain HTTP/1.1 requests to a node (`/healthz`, `/readyz`, `/metrics`) and a reader for the
//! Prometheus text format, without an HTTP client dependency.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET path` on `addr`; the status code and body.
///
/// # Panics
/// When the node does not answer within 5 s or the answer has no status line.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: skua\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write request");
    read_response(s).await
}

/// Reads an HTTP response to the end: its status code and body.
///
/// # Panics
/// When it does not end within 5 s or has no status line.
pub async fn read_response(mut s: TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .expect("response within 5 s")
        .expect("read response");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status =
        text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status line: {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// Polls `GET path` until its status is `status`, for at most `within`; returns the body.
///
/// # Panics
/// When the status never becomes `status`.
pub async fn wait_for_status(addr: SocketAddr, path: &str, status: u16, within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (s, body) = get(addr, path).await;
        if s == status {
            return body;
        }
        assert!(tokio::time::Instant::now() < deadline, "{path} never answered {status}; last {s}: {body:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One sample: metric name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// The parsed samples of a Prometheus text exposition.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The exposition as served.
    pub text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    /// Scrapes `/metrics` of `addr`.
    ///
    /// # Panics
    /// When `/metrics` does not answer 200 or a sample line does not parse.
    pub async fn of(addr: SocketAddr) -> Self {
        let (status, text) = get(addr, "/metrics").await;
        assert_eq!(status, 200, "/metrics: {text}");
        Self::parse(text)
    }

    /// Parses an exposition.
    ///
    /// # Panics
    /// When a sample line does not parse.
    pub fn parse(text: String) -> Self {
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("sample line {line:?}"));
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("sample value {line:?}"));
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), Vec::new()),
                Some((n, rest)) => {
                    let rest = rest.strip_suffix('}').unwrap_or_else(|| panic!("labels {line:?}"));
                    let labels = rest
                        .split("\",")
                        .filter(|p| !p.is_empty())
                        .map(|p| {
                            let (k, v) = p.split_once("=\"").unwrap_or_else(|| panic!("label {p:?} in {line:?}"));
                            (k.to_owned(), v.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (n.to_owned(), labels)
                }
            };
            samples.push((name, labels, value));
        }
        Self { text, samples }
    }

    /// The value of the sample `name` whose labels include every one of `labels`.
    ///
    /// # Panics
    /// When the exposition has no such sample: a renamed metric or label value must fail the
    /// test that reads it, never read as 0 (issue 35). [`Self::value_or_zero`] is for a labelled
    /// series that appears only once counted.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.find(name, labels)
            .unwrap_or_else(|| panic!("no sample {name}{labels:?} in the exposition:\n{}", self.text))
    }

    /// The value of the sample `name` with `labels`, 0 when the family `name` is declared
    /// (`# TYPE name`) but has no sample with those labels yet.
    ///
    /// # Panics
    /// When the family is not declared at all (a renamed or removed metric).
    pub fn value_or_zero(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.find(name, labels).unwrap_or_else(|| {
            assert!(self.declares(name), "metric family {name} is not in the exposition:\n{}", self.text);
            0.0
        })
    }

    /// Whether the exposition declares the family `name` (a `# TYPE` line).
    pub fn declares(&self, name: &str) -> bool {
        self.text.lines().any(|l| l.strip_prefix("# TYPE ").and_then(|r| r.split(' ').next()) == Some(name))
    }

    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|(n, ls, _)| n == name && labels.iter().all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v)))
            .map(|(_, _, v)| *v)
    }

    /// Every label value of every sample.
    pub fn label_values(&self) -> impl Iterator<Item = &str> {
        self.samples.iter().flat_map(|(_, ls, _)| ls.iter().map(|(_, v)| v.as_str()))
    }
}
