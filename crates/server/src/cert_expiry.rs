//! `skua_certificate_expiry_timestamp_seconds`: when the certificate files this node uses expire,
//! read from disk at every scrape (the files the next connection or handshake uses), for the
//! certificate-expiry alerts (deploy/monitoring/skua-alerts.yaml).
//!
//! A file holding several certificates (a chain, a CA bundle) reports the earliest expiry. The
//! expiry is read from the DER (`tbsCertificate.validity.notAfter`) with the few lines below: no
//! X.509 library is linked for one field.

use std::path::PathBuf;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::config::ServerConfig;

/// The certificate files of `config`, by the setting that names them.
pub fn watched(config: &ServerConfig) -> Vec<(&'static str, PathBuf)> {
    let mut files = Vec::new();
    if let Some(c) = &config.tls.client {
        files.push(("tls_cert", c.cert.clone()));
    }
    if let Some(c) = &config.tls.grpc {
        files.push(("grpc_tls_cert", c.cert.clone()));
    }
    for (ca, cert, files_of) in [
        ("bus_tls_ca", "bus_tls_cert", &config.bus_tls),
        ("presence_tls_ca", "presence_tls_cert", &config.presence_tls),
    ] {
        if let Some(p) = &files_of.ca {
            files.push((ca, p.clone()));
        }
        if let Some(c) = &files_of.client {
            files.push((cert, c.cert.clone()));
        }
    }
    if let crate::config::StoreConfig::Url(url) = &config.store {
        let query = url.split_once('?').map_or("", |(_, q)| q);
        for pair in query.split('&') {
            let Some((key, value)) = pair.split_once('=') else { continue };
            let setting = match key {
                "sslrootcert" | "ssl-root-cert" | "ssl-ca" => "store_sslrootcert",
                "sslcert" | "ssl-cert" => "store_sslcert",
                _ => continue,
            };
            files.push((setting, PathBuf::from(percent_decode(value))));
        }
    }
    files
}

/// The series for `files`; a file that cannot be read or holds no certificate gets none (the
/// connection that needs it logs why).
pub fn render(files: &[(&'static str, PathBuf)], out: &mut String) {
    use std::fmt::Write as _;
    if files.is_empty() {
        return;
    }
    out.push_str(
        "# HELP skua_certificate_expiry_timestamp_seconds When the earliest certificate in a file this node uses expires (unix time), by the setting that names the file.\n\
         # TYPE skua_certificate_expiry_timestamp_seconds gauge\n",
    );
    for (setting, path) in files {
        let Ok(pem) = std::fs::read(path) else { continue };
        if let Some(expiry) = earliest_expiry(&pem) {
            let _ = writeln!(out, "skua_certificate_expiry_timestamp_seconds{{setting=\"{setting}\"}} {expiry}");
        }
    }
}

/// The earliest `notAfter` (unix seconds) of the PEM certificates in `pem`.
pub fn earliest_expiry(pem: &[u8]) -> Option<i64> {
    CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).filter_map(|der| not_after(&der)).min()
}

/// `tbsCertificate.validity.notAfter` of a DER certificate, in unix seconds.
fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert, _) = tlv(der)?;
    let (_, mut tbs, _) = tlv(cert)?;
    // [0] version (optional), serialNumber, signature, issuer, then validity.
    let mut skipped = 0;
    loop {
        let (tag, body, rest) = tlv(tbs)?;
        if tag == 0xA0 {
            tbs = rest;
            continue;
        }
        if skipped == 3 {
            let (_, _not_before, rest) = tlv(body)?;
            let (tag, time, _) = tlv(rest)?;
            return parse_time(tag, time);
        }
        skipped += 1;
        tbs = rest;
    }
}

/// One DER element: its tag, its contents and what follows it.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7F);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b)), &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// A UTCTime (`YYMMDDHHMMSSZ`, tag 0x17) or GeneralizedTime (`YYYYMMDDHHMMSSZ`, tag 0x18).
fn parse_time(tag: u8, time: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(time).ok()?.strip_suffix('Z')?;
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (year, at) = match (tag, s.len()) {
        (0x17, 12) => {
            let yy = num(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (0x18, 14) => (num(0..4)?, 4),
        _ => return None,
    };
    let (month, day) = (num(at..at + 2)?, num(at + 2..at + 4)?);
    let (h, m, sec) = (num(at + 4..at + 6)?, num(at + 6..at + 8)?, num(at + 8..at + 10)?);
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `%XX` sequences of a url query value decoded (paths with spaces or `&`).
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_expiring(year: i32, month: u8, day: u8) -> String {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(year, month, day);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn the_expiry_of_utc_and_generalized_times_is_read_from_the_der() {
        // 2030-06-15 00:00:00 UTC (UTCTime) and 2051-01-02 (GeneralizedTime: from 2050 on).
        assert_eq!(earliest_expiry(cert_expiring(2030, 6, 15).as_bytes()), Some(1_907_712_000));
        assert_eq!(earliest_expiry(cert_expiring(2051, 1, 2).as_bytes()), Some(2_556_230_400));
        assert_eq!(earliest_expiry(b"not a certificate"), None);
    }

    #[test]
    fn a_bundle_reports_its_earliest_certificate() {
        let bundle = format!("{}{}", cert_expiring(2040, 1, 1), cert_expiring(2031, 3, 1));
        assert_eq!(earliest_expiry(bundle.as_bytes()), Some(1_930_089_600));
    }

    #[test]
    fn store_certificate_paths_come_from_the_url() {
        let mut config = ServerConfig::from_layers(&[]).unwrap();
        config.store = crate::config::StoreConfig::Url(
            "postgres://u:p@db/skua?sslmode=verify-full&sslrootcert=/etc/skua/ca%20x.crt&sslcert=/c.crt".into(),
        );
        let files = watched(&config);
        assert!(files.contains(&("store_sslrootcert", PathBuf::from("/etc/skua/ca x.crt"))), "{files:?}");
        assert!(files.contains(&("store_sslcert", PathBuf::from("/c.crt"))), "{files:?}");
    }
}
