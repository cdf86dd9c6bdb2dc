//! TLS on the node's listeners (docs/security.md): certificate chains and keys read from PEM
//! files and reloaded without a restart, the ring-only rustls setup, and the self-signed pair of
//! `skua serve --dev --tls-self-signed`.
//!
//! A [`CertReloader`] is the listeners' `ResolvesServerCert`: every handshake takes the pair it
//! holds now. Its watcher task compares the files' modification times and sizes every
//! `tls_reload_interval`; a changed pair that does not load (unreadable, not PEM, key not
//! matching the certificate) is logged and the old pair stays in use.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// ALPN of the client listener: WebSockets upgrade over HTTP/1.1.
const ALPN_CLIENT: &[&[u8]] = &[b"http/1.1"];
/// ALPN of the control plane: gRPC is HTTP/2.
const ALPN_GRPC: &[&[u8]] = &[b"h2"];

/// Names the `--tls-self-signed` certificate is valid for.
pub const SELF_SIGNED_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// Installs ring as the process's rustls provider (idempotent). Libraries that build their own
/// rustls configs from the process default (redis, sqlx) then find it.
pub fn install_provider() {
    // Err means a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Why certificate files were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{path}: no PEM certificate (-----BEGIN CERTIFICATE-----) found")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no usable private key.
    #[error("{path}: no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The pair does not belong together, or rustls refused it.
    #[error("{cert} with {key}: {reason}")]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        reason: String,
    },
    /// The self-signed pair could not be made or written.
    #[error("self-signed certificate: {0}")]
    SelfSigned(String),
}

/// A certificate chain file and its private key file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key of the leaf.
    pub key: PathBuf,
}

/// TLS settings of the node's listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTlsConfig {
    /// The client listener's pair (`tls_cert`, `tls_key`): `wss://` when set.
    pub client: Option<CertFiles>,
    /// The control plane's pair (`grpc_tls_cert`, `grpc_tls_key`; by default the client's).
    pub grpc: Option<CertFiles>,
    /// How often the files are checked for changes (`tls_reload_interval`); zero: never.
    pub reload_interval: Duration,
}

impl Default for ListenerTlsConfig {
    fn default() -> Self {
        Self { client: None, grpc: None, reload_interval: Duration::from_secs(10) }
    }
}

/// Counts of the reloader's work, for tests and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// Changed pairs that loaded and are now served.
    pub reloads: u64,
    /// Changed pairs that did not load (the previous pair stayed).
    pub failures: u64,
}

/// Modification time and size of both files: a change of either triggers a reload.
type Stamp = (Option<SystemTime>, u64, Option<SystemTime>, u64);

/// The certificate resolver of a TLS listener, reloading its files when they change.
pub struct CertReloader {
    files: CertFiles,
    current: RwLock<Arc<CertifiedKey>>,
    // The stamp of the files last tried (loaded or refused): a refused pair is not retried
    // until the files change again, so one bad write logs one error.
    stamp: Mutex<Option<Stamp>>,
    status: watch::Sender<ReloadStatus>,
}

impl std::fmt::Debug for CertReloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertReloader").field("files", &self.files).finish_non_exhaustive()
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // std RwLock: held for one Arc clone, never across an await.
        Some(self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }
}

impl CertReloader {
    /// Loads `files`.
    ///
    /// # Errors
    /// When a file cannot be read or parsed, or the key does not match the certificate.
    pub fn load(files: CertFiles) -> Result<Arc<Self>, TlsError> {
        let stamp = stamp_of(&files);
        let pair = load_pair(&files)?;
        Ok(Arc::new(Self {
            files,
            current: RwLock::new(Arc::new(pair)),
            stamp: Mutex::new(stamp),
            status: watch::channel(ReloadStatus::default()).0,
        }))
    }

    /// The files this reloader serves.
    pub fn files(&self) -> &CertFiles {
        &self.files
    }

    /// Follows the reload counts: a test writes new files and waits for `reloads` to move.
    pub fn status(&self) -> watch::Receiver<ReloadStatus> {
        self.status.subscribe()
    }

    /// The leaf certificate served now (DER).
    pub fn current_leaf(&self) -> Option<CertificateDer<'static>> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).cert.first().cloned()
    }

    /// Reloads the pair if the files changed since the last attempt. Returns whether a new pair
    /// is now served; a pair that does not load is logged and counted, the old one stays.
    pub fn check(&self) -> bool {
        let stamp = stamp_of(&self.files);
        {
            let mut last = self.stamp.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if *last == stamp {
                return false;
            }
            *last = stamp;
        }
        match load_pair(&self.files) {
            Ok(pair) => {
                *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(pair);
                self.status.send_modify(|s| s.reloads += 1);
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded.");
                true
            }
            Err(e) => {
                self.status.send_modify(|s| s.failures += 1);
                tracing::error!(error = %e, "TLS certificate files changed but do not load; still serving the previous pair.");
                false
            }
        }
    }

    /// Checks the files every `every` until `stop` is cancelled.
    pub async fn watch(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            // File reads are small and rare; blocking the worker for them is fine.
            self.check();
        }
    }
}

fn stamp_of(files: &CertFiles) -> Option<Stamp> {
    // `metadata` follows symlinks: a Kubernetes Secret volume swaps its `..data` link, and the
    // target's times change.
    let a = std::fs::metadata(&files.cert).ok()?;
    let b = std::fs::metadata(&files.key).ok()?;
    Some((a.modified().ok(), a.len(), b.modified().ok(), b.len()))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_owned(), source })
}

/// Parses every certificate of a PEM chain.
///
/// # Errors
/// When the file cannot be read or holds no certificate.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok).collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_owned() });
    }
    Ok(certs)
}

/// Parses the first private key of a PEM file.
///
/// # Errors
/// When the file cannot be read or holds no supported key.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Key { path: path.to_owned(), reason: e.to_string() })
}

fn load_pair(files: &CertFiles) -> Result<CertifiedKey, TlsError> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(certs, key, &provider).map_err(|e| TlsError::Pair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        reason: e.to_string(),
    })
}

/// A listener's TLS: the acceptor handed to the accept loop, and the reloader behind it.
#[derive(Clone)]
pub struct ListenerTls {
    /// Completes handshakes with the reloader's current pair.
    pub acceptor: TlsAcceptor,
    /// Serves and reloads the pair.
    pub certs: Arc<CertReloader>,
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerTls").field("certs", &self.certs).finish_non_exhaustive()
    }
}

fn acceptor(certs: Arc<CertReloader>, alpn: &[&[u8]]) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Pair {
            cert: certs.files.cert.clone(),
            key: certs.files.key.clone(),
            reason: e.to_string(),
        })?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The TLS of a node's two listeners.
#[derive(Debug, Clone, Default)]
pub struct NodeTls {
    /// The client (WebSocket) listener's.
    pub client: Option<ListenerTls>,
    /// The control plane's.
    pub grpc: Option<ListenerTls>,
    /// The MQTT-over-TLS device listener's (`mqtt_tls_listen`): the client listener's
    /// certificate and reloader, without ALPN (MQTT clients rarely offer one, and a client
    /// offering `mqtt` or a vendor's name must not fail the handshake).
    pub mqtt: Option<ListenerTls>,
    /// How often the reloaders check their files.
    pub reload_interval: Duration,
}

impl NodeTls {
    /// Loads the configured pairs; listeners naming the same files share one reloader.
    ///
    /// # Errors
    /// As [`CertReloader::load`].
    pub fn load(config: &ListenerTlsConfig) -> Result<Self, TlsError> {
        let client = config.client.clone().map(CertReloader::load).transpose()?;
        let grpc = match (&config.grpc, &client) {
            (Some(g), Some(c)) if *g == c.files => Some(c.clone()),
            (Some(g), _) => Some(CertReloader::load(g.clone())?),
            (None, _) => None,
        };
        let mqtt = client
            .clone()
            .map(|c| Ok::<_, TlsError>(ListenerTls { acceptor: acceptor(c.clone(), &[])?, certs: c }))
            .transpose()?;
        Ok(Self {
            mqtt,
            client: client
                .map(|c| Ok::<_, TlsError>(ListenerTls { acceptor: acceptor(c.clone(), ALPN_CLIENT)?, certs: c }))
                .transpose()?,
            grpc: grpc
                .map(|c| Ok::<_, TlsError>(ListenerTls { acceptor: acceptor(c.clone(), ALPN_GRPC)?, certs: c }))
                .transpose()?,
            reload_interval: config.reload_interval,
        })
    }

    /// The distinct reloaders, each to be watched once.
    pub fn reloaders(&self) -> Vec<Arc<CertReloader>> {
        let mut out: Vec<Arc<CertReloader>> = Vec::new();
        for l in [&self.client, &self.grpc].into_iter().flatten() {
            if !out.iter().any(|r| Arc::ptr_eq(r, &l.certs)) {
                out.push(l.certs.clone());
            }
        }
        out
    }
}

/// Makes (or reuses) the `--tls-self-signed` pair in `dir`: `dev-cert.pem` and `dev-key.pem`,
/// valid for [`SELF_SIGNED_NAMES`]. An existing pair that loads is kept, so clients that trust
/// it keep working across restarts.
///
/// # Errors
/// When the directory or files cannot be written, or generation fails.
pub fn self_signed(dir: &Path) -> Result<(CertFiles, bool), TlsError> {
    let files = CertFiles { cert: dir.join("dev-cert.pem"), key: dir.join("dev-key.pem") };
    if load_pair(&files).is_ok() {
        return Ok((files, false));
    }
    let names: Vec<String> = SELF_SIGNED_NAMES.iter().map(|s| (*s).to_owned()).collect();
    let made = rcgen::generate_simple_self_signed(names).map_err(|e| TlsError::SelfSigned(e.to_string()))?;
    let err = |what: &Path, e: std::io::Error| TlsError::SelfSigned(format!("cannot write {}: {e}", what.display()));
    std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    write_private(&files.key, made.signing_key.serialize_pem().as_bytes()).map_err(|e| err(&files.key, e))?;
    std::fs::write(&files.cert, made.cert.pem()).map_err(|e| err(&files.cert, e))?;
    Ok((files, true))
}

/// Writes a key file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("skua-tls-{name}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn self_signed_pair_is_made_once_and_loads() {
        let dir = temp_dir("self-signed");
        let (files, made) = self_signed(&dir).unwrap();
        assert!(made);
        let first = CertReloader::load(files.clone()).unwrap().current_leaf().unwrap();
        let (again, made) = self_signed(&dir).unwrap();
        assert!(!made, "an existing pair is kept");
        assert_eq!(CertReloader::load(again).unwrap().current_leaf().unwrap(), first);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let dir = temp_dir("bad");
        let missing = CertFiles { cert: dir.join("nope.pem"), key: dir.join("nope-key.pem") };
        assert!(matches!(CertReloader::load(missing), Err(TlsError::Read { .. })));
        std::fs::write(dir.join("junk.pem"), "not pem").unwrap();
        let (good, _) = self_signed(&dir).unwrap();
        let junk_cert = CertFiles { cert: dir.join("junk.pem"), key: good.key.clone() };
        assert!(matches!(CertReloader::load(junk_cert), Err(TlsError::NoCertificate { .. })));
        let junk_key = CertFiles { cert: good.cert.clone(), key: dir.join("junk.pem") };
        assert!(matches!(CertReloader::load(junk_key), Err(TlsError::Key { .. })));
        let other = temp_dir("other");
        let (other, _) = self_signed(&other).unwrap();
        let mismatched = CertFiles { cert: good.cert.clone(), key: other.key.clone() };
        assert!(matches!(CertReloader::load(mismatched), Err(TlsError::Pair { .. })));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_bad_new_pair_keeps_the_old_one() {
        let dir = temp_dir("keep");
        let (files, _) = self_signed(&dir).unwrap();
        let reloader = CertReloader::load(files.clone()).unwrap();
        let before = reloader.current_leaf().unwrap();
        std::fs::write(&files.cert, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
        assert!(!reloader.check());
        assert_eq!(*reloader.status().borrow(), ReloadStatus { reloads: 0, failures: 1 });
        assert_eq!(reloader.current_leaf().unwrap(), before);
        assert!(!reloader.check(), "unchanged files are not retried");
        assert_eq!(reloader.status().borrow().failures, 1);
        let _ = std::fs::remove_dir_all(dir);
    }
}
