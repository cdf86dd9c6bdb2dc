//! [`RedisConn`]: the one Redis connection that presence, history, idempotency keys and the wake
//! limits share, re-made with renewed certificates.
//!
//! redis-rs's `ConnectionManager` reconnects by itself, but with the certificates its `Client`
//! was built with. With a [`RedisTlsReload`], a failed operation whose error is not Redis's own
//! reply (the connection dropped, was refused, timed out, or its TLS handshake failed) reads the
//! certificate files again, at most once per [`TLS_RECHECK_INTERVAL`]; when they changed, a new
//! manager built with them replaces the old one, so the next connection uses the renewed files.
//! Operations already under way finish on the manager they started with.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::{Client, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tracing::{info, warn};

/// The shortest time between two reads of the certificate files after failed operations (an
/// outage fails many operations at once; one read serves them all).
pub const TLS_RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Certificates of a `rediss://` connection, as PEM bytes read by the caller.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// CA certificates Redis's certificate must chain to; `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate chain and private key, for a Redis with `tls-auth-clients yes`.
    pub client_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_pem", &self.ca_pem.as_ref().map(|_| "<pem>"))
            .field("client_pem", &self.client_pem.as_ref().map(|_| "<certificate and redacted key>"))
            .finish()
    }
}

/// Reads a `rediss://` connection's certificate files again; `Err` is a sentence (a file that
/// cannot be read), after which the current certificates stay in use.
pub type RedisTlsReload = Arc<dyn Fn() -> Result<RedisTls, String> + Send + Sync>;

/// The shared Redis connection (cheap to clone: one `Arc`). See the [module docs](self).
#[derive(Clone)]
pub struct RedisConn(Arc<Inner>);

struct Inner {
    manager: RwLock<ConnectionManager>,
    renew: Option<Renew>,
    /// Managers replaced because the certificate files changed.
    tls_reloads: AtomicU64,
}

struct Renew {
    url: String,
    config: ConnectionManagerConfig,
    reload: RedisTlsReload,
    /// The certificates the current manager was built with, and when the files were last read.
    state: Mutex<(RedisTls, Instant)>,
}

impl RedisConn {
    /// Connects to `url` with `tls` (if any) and waits for the first connection.
    ///
    /// # Errors
    /// When the url or the certificates are not usable, or Redis cannot be reached.
    pub(crate) async fn connect(
        url: &str,
        config: ConnectionManagerConfig,
        tls: Option<RedisTls>,
        reload: Option<RedisTlsReload>,
    ) -> RedisResult<Self> {
        let manager = ConnectionManager::new_with_config(client(url, tls.as_ref())?, config.clone()).await?;
        let renew = reload.map(|reload| Renew {
            url: url.to_owned(),
            config,
            reload,
            state: Mutex::new((tls.unwrap_or_default(), Instant::now())),
        });
        Ok(Self(Arc::new(Inner { manager: RwLock::new(manager), renew, tls_reloads: AtomicU64::new(0) })))
    }

    /// How many times renewed certificate files replaced the connection.
    pub fn tls_reloads(&self) -> u64 {
        self.0.tls_reloads.load(Ordering::Relaxed)
    }

    fn current(&self) -> ConnectionManager {
        self.0.manager.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// After a failed operation: re-reads the files (see the module docs) and, when they
    /// changed, replaces the manager.
    fn failed(&self, error: &RedisError) {
        let Some(renew) = &self.0.renew else { return };
        // Redis answered: the connection works.
        if error.code().is_some() {
            return;
        }
        let mut state = renew.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.1.elapsed() < TLS_RECHECK_INTERVAL {
            return;
        }
        state.1 = Instant::now();
        let fresh = match (renew.reload)() {
            Ok(fresh) if fresh == state.0 => return,
            Ok(fresh) => fresh,
            Err(e) => {
                warn!(error = %e, "Cannot read the Redis certificate files again; keeping the previous ones.");
                return;
            }
        };
        let manager = client(&renew.url, Some(&fresh))
            .and_then(|client| ConnectionManager::new_lazy_with_config(client, renew.config.clone()));
        match manager {
            Ok(manager) => {
                *self.0.manager.write().unwrap_or_else(PoisonError::into_inner) = manager;
                state.0 = fresh;
                self.0.tls_reloads.fetch_add(1, Ordering::Relaxed);
                info!("The Redis certificate files changed; the next connection uses them.");
            }
            Err(e) => {
                warn!(error = %e, "The Redis certificate files changed but are not usable; keeping the previous ones.");
            }
        }
    }
}

/// A redis-rs client for `url`, with `tls`'s certificates.
fn client(url: &str, tls: Option<&RedisTls>) -> RedisResult<Client> {
    match tls {
        None => Client::open(url),
        Some(tls) => Client::build_with_tls(
            url,
            ::redis::TlsCertificates {
                client_tls: tls
                    .client_pem
                    .clone()
                    .map(|(client_cert, client_key)| ::redis::ClientTlsConfig { client_cert, client_key }),
                root_cert: tls.ca_pem.clone(),
            },
        ),
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let mut manager = self.current();
        Box::pin(async move {
            let r = manager.req_packed_command(cmd).await;
            if let Err(e) = &r {
                self.failed(e);
            }
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let mut manager = self.current();
        Box::pin(async move {
            let r = manager.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &r {
                self.failed(e);
            }
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.current().get_db()
    }
}

impl fmt::Debug for RedisConn {
    // Not derived: the manager's `Debug` shows the connection info, password included.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConn").field("renews_tls", &self.0.renew.is_some()).finish_non_exhaustive()
    }
}
