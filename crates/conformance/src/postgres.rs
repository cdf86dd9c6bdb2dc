//! A fresh Postgres database per test, for tests that run nodes on Postgres (STYLE.md §8).
//!
//! Needs `SKUA_TEST_POSTGRES_URL`, an admin URL whose role may create databases. Unset, the
//! test says `SKIPPED: …` and passes, except under `CI=true`, where it fails.

use sqlx::{AssertSqlSafe, Connection, PgConnection};

const URL_VAR: &str = "SKUA_TEST_POSTGRES_URL";

/// A database of its own, dropped (best effort) with this value.
#[derive(Debug)]
pub struct TestDatabase {
    admin_url: String,
    /// Its name, `skua_test_<uuid>`.
    pub name: String,
    /// Connects to this database.
    pub url: String,
}

/// The admin URL, or `None` (after saying so) when the variable is unset.
///
/// # Panics
/// When it is unset under `CI=true`.
fn admin_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            crate::skip::skip(&format!("{URL_VAR} not set"));
            None
        }
    }
}

impl TestDatabase {
    /// Creates an empty database, or `None` when skipped.
    ///
    /// # Panics
    /// When the variable is unset under `CI=true`, or Postgres refuses.
    pub async fn create() -> Option<Self> {
        let admin_url = admin_url()?;
        let name = format!("skua_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&admin_url).await.unwrap_or_else(|e| panic!("{URL_VAR}: {e}"));
        // The name is ours (hex digits), so it is safe to splice in.
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let _ = admin.close().await;
        let url = with_database(&admin_url, &name);
        Some(Self { admin_url, name, url })
    }

    /// Creates a database and runs `migrate` on its URL (the store's migrations: this crate
    /// does not depend on the store), or `None` when skipped.
    ///
    /// # Panics
    /// When the variable is unset under `CI=true`, Postgres refuses, or `migrate` fails.
    pub async fn migrated_by<F, E>(migrate: impl FnOnce(String) -> F) -> Option<Self>
    where
        F: std::future::Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        let db = Self::create().await?;
        migrate(db.url.clone()).await.unwrap_or_else(|e| panic!("migrating {}: {e:#}", db.name));
        Some(db)
    }
}

impl TestDatabase {
    /// The server's `host:port`, as named in the URL (default port 5432).
    ///
    /// # Panics
    /// When the URL names no host that resolves.
    pub fn server_addr(&self) -> std::net::SocketAddr {
        use std::net::ToSocketAddrs;
        let rest = self.url.split_once("://").map_or(self.url.as_str(), |(_, r)| r);
        let authority = rest.split('/').next().unwrap_or(rest);
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host_port = if host_port.contains(':') { host_port.to_owned() } else { format!("{host_port}:5432") };
        host_port.to_socket_addrs().ok().and_then(|mut a| a.next()).expect("Postgres address")
    }

    /// This database's URL with the server replaced by `addr` (to go through a proxy).
    pub fn url_via(&self, addr: std::net::SocketAddr) -> String {
        let (scheme, rest) = self.url.split_once("://").unwrap_or(("postgres", &self.url));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@")).unwrap_or_default();
        format!("{scheme}://{user}{addr}/{path}")
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime, which must not be blocked on: use a thread with a
        // runtime of its own, and wait for it.
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&admin_url).await?;
                sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                    .execute(&mut admin)
                    .await?;
                admin.close().await?;
                Ok(())
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: test database {} not dropped: {e}", self.name),
            Err(_) => eprintln!("warning: test database {} not dropped: the dropping thread panicked", self.name),
        }
    }
}

/// `admin_url` with its database replaced by `name` (host, user and parameters kept).
pub fn with_database(admin_url: &str, name: &str) -> String {
    let (base, params) = admin_url.split_once('?').map_or((admin_url, None), |(b, p)| (b, Some(p)));
    let authority = base.find("://").map_or(0, |i| i + 3);
    let base = base[authority..].find('/').map_or(base, |slash| &base[..authority + slash]);
    match params {
        Some(params) => format!("{base}/{name}?{params}"),
        None => format!("{base}/{name}"),
    }
}
