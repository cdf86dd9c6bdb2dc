//! `skua`: one binary for every role. See shared/CONTRACT.md for the commands and flags.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use skua_server::config as node_config;
use skua_server::config::{ConfigError, ServerConfig, Settings};
use skua_server::{fixtures, node};

#[derive(Debug, Parser)]
#[command(name = "skua", version, about = "Skua: a clustered real-time broker speaking the NoLag protocol")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a node (edge).
    Serve(Box<ServeArgs>),
    /// Apply the store's migrations and exit.
    Migrate(MigrateArgs),
    /// Operate the control plane over gRPC (projects, apps, rooms, actors, grants, lobbies, …).
    Admin(Box<skua_server::admin::AdminArgs>),
}

#[derive(Debug, clap::Args)]
struct MigrateArgs {
    /// TOML configuration file (its `store` key is used).
    #[arg(long, env = "SKUA_CONFIG")]
    config: Option<PathBuf>,
    /// The store to migrate: `sqlite://PATH` or `postgres://…` [default: the configured store].
    #[arg(long, env = "SKUA_STORE")]
    store: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Load the demo fixtures and print the demo tokens.
    #[arg(long, env = "SKUA_DEV")]
    dev: bool,
    /// TOML configuration file (same keys as the flags, in snake_case).
    #[arg(long, env = "SKUA_CONFIG")]
    config: Option<PathBuf>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
    /// With --dev: serve wss:// (and the control plane over TLS) with a self-signed certificate
    /// for localhost, 127.0.0.1 and ::1, made once in the data directory (dev-cert.pem, dev-key.pem).
    #[arg(long, requires = "dev")]
    tls_self_signed: bool,
    #[command(flatten)]
    settings: Settings,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Migrate(args) => migrate(args),
        Command::Admin(args) => skua_server::admin::run(*args),
    }
}

fn read_config_file(path: Option<&PathBuf>) -> Result<Settings, ExitCode> {
    let Some(path) = path else { return Ok(Settings::default()) };
    let text = std::fs::read_to_string(path).map_err(|e| {
        eprintln!("skua: cannot read config file {}: {e}", path.display());
        ExitCode::from(2)
    })?;
    Settings::from_toml(&text).map_err(|e| {
        eprintln!("skua: {}: {e}", path.display());
        ExitCode::from(2)
    })
}

fn resolve(layers: &[&Settings]) -> Result<ServerConfig, ExitCode> {
    ServerConfig::from_layers(layers).map_err(|e| {
        eprintln!("skua: {e}");
        ExitCode::from(if matches!(e, ConfigError::UnknownOrInvalid(_)) { 2 } else { 64 })
    })
}

fn migrate(args: MigrateArgs) -> ExitCode {
    let file = match read_config_file(args.config.as_ref()) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let mut flags = Settings::default();
    flags.node.store = args.store;
    let config = match resolve(&[&file, &flags]) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let skua_server::config::StoreConfig::Url(url) = &config.store else {
        eprintln!("skua: the memory store has nothing to migrate");
        return ExitCode::from(64);
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("skua: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(node::migrate_with(url, config.migrate)) {
        Ok(unknown) => {
            println!("skua: migrations applied");
            if !unknown.is_empty() {
                let list: Vec<String> = unknown.iter().map(i64::to_string).collect();
                println!(
                    "skua: the database also holds migrations of a newer release ({}); left applied (a rollback: \
                     they only add, this release runs on them)",
                    list.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("skua: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The admin API key `--dev` uses unless one is configured (printed in the dev banner).
const DEV_ADMIN_KEY: &str = "skua-dev-admin-key";
/// The internal addresses `--dev` lets wake URLs name unless configured: loopback.
const DEV_WAKE_ALLOWED_HOSTS: [&str; 3] = ["127.0.0.0/8", "::1", "localhost"];
/// The gRPC listener `--dev` uses unless one is configured.
const DEV_GRPC_LISTEN: &str = "127.0.0.1:50051";

fn serve(args: ServeArgs) -> ExitCode {
    let file = match read_config_file(args.config.as_ref()) {
        Ok(f) => f,
        Err(code) => return code,
    };
    // `--dev` defaults sit below the config file, environment and flags.
    let mut dev_defaults = Settings::default();
    dev_defaults.node.grpc_listen = Some(DEV_GRPC_LISTEN.into());
    dev_defaults.node.admin_key = Some(DEV_ADMIN_KEY.into());
    dev_defaults.control.grpc_reflection_public = Some(true);
    // The demo's and the tests' receivers are local (issue 33; CONTRACT.md).
    dev_defaults.webhooks.webhook_allow_loopback = Some(true);
    dev_defaults.members.wake_allowed_hosts = Some(DEV_WAKE_ALLOWED_HOSTS.iter().map(|h| (*h).to_owned()).collect());
    // Clients typed by hand (wscat) take their time to send `auth`.
    dev_defaults.edge.auth_timeout = Some("0s".into());
    // The default listener is best effort; a configured one must work (CONTRACT.md: default
    // 127.0.0.1:50051).
    let grpc_from_default = file.node.grpc_listen.is_none() && args.settings.node.grpc_listen.is_none();
    let layers: Vec<&Settings> =
        if args.dev { vec![&dev_defaults, &file, &args.settings] } else { vec![&file, &args.settings] };
    let mut config = match resolve(&layers) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if grpc_from_default && config.grpc_listen.is_some() && config.admin_key.is_none() {
        // Logged once the subscriber is up (see `run`).
        config.grpc_listen = None;
    }
    if config.grpc_listen.is_some() && config.admin_key.is_none() {
        eprintln!("skua: invalid setting admin_key: required when grpc_listen is set (SKUA_ADMIN_KEY)");
        return ExitCode::from(64);
    }
    // Placeholder secrets (issue 23, item 6); `--dev` runs on well-known ones by design.
    if !args.dev
        && let Err(e) = skua_server::config::secrets::check(&config, None)
    {
        eprintln!("skua: {e}");
        return ExitCode::from(64);
    }
    if args.tls_self_signed {
        if config.tls.client.is_some() {
            eprintln!("skua: --tls-self-signed and tls_cert/tls_key are exclusive");
            return ExitCode::from(64);
        }
        let dir = data_dir(&config.store);
        match skua_server::tls::self_signed(&dir) {
            Ok((files, made)) => {
                eprintln!(
                    "skua: {} self-signed TLS certificate for {} at {} (key {}); clients must trust that file",
                    if made { "made a" } else { "reusing the" },
                    skua_server::tls::SELF_SIGNED_NAMES.join(", "),
                    files.cert.display(),
                    files.key.display()
                );
                if config.tls.grpc.is_none() {
                    config.tls.grpc = Some(files.clone());
                }
                config.tls.client = Some(files);
            }
            Err(e) => {
                eprintln!("skua: {e}");
                return ExitCode::from(2);
            }
        }
    }
    // After --tls-self-signed, which provides the certificate mqtts uses.
    if config.mqtt_tls_listen.is_some() && config.tls.client.is_none() {
        eprintln!(
            "skua: mqtt_tls_listen needs the client listener's certificate (tls_cert and tls_key, or --tls-self-signed)"
        );
        return ExitCode::from(64);
    }
    if args.print_config {
        println!("{config:#?}");
        return ExitCode::SUCCESS;
    }
    // Certificate files are checked before any port is bound; the node loads them again.
    skua_server::tls::install_provider();
    if let Err(e) = skua_server::tls::NodeTls::load(&config.tls) {
        eprintln!("skua: TLS: {e}");
        return ExitCode::from(2);
    }
    let mut sources: Vec<(String, String)> = Vec::new();
    if args.dev {
        sources.push(("built-in dev fixtures".into(), fixtures::DEV_FIXTURES.into()));
    }
    if let Some(path) = &config.fixtures {
        match std::fs::read_to_string(path) {
            Ok(text) => sources.push((path.display().to_string(), text)),
            Err(e) => {
                eprintln!("skua: cannot read fixtures file {}: {e}", path.display());
                return ExitCode::from(64);
            }
        }
    }
    let refs: Vec<(&str, &str)> = sources.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    let fixtures = if refs.is_empty() {
        None
    } else {
        match fixtures::load_data(&refs) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("skua: {e}");
                return ExitCode::from(64);
            }
        }
    };
    if !args.dev
        && let Err(e) = skua_server::config::secrets::check(&config, fixtures.as_ref())
    {
        eprintln!("skua: {e}");
        return ExitCode::from(64);
    }
    // A tokenless /metrics lists every project id to whoever reaches it (issue 33, item 12):
    // outside `--dev` the operator chooses it explicitly.
    if !args.dev && config.edge.metrics_token.is_none() && !config.metrics_public {
        eprintln!(
            "skua: /metrics would be served without a token: set metrics_token (SKUA_METRICS_TOKEN), or \
             metrics_public = true (--metrics-public true, SKUA_METRICS_PUBLIC=true) to serve it without one"
        );
        return ExitCode::from(64);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("skua: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the OTLP exporter's gRPC channel runs on it.
    let telemetry = {
        let _rt = rt.enter();
        match skua_server::telemetry::init(config.otlp_endpoint.as_deref(), config.node_id.as_str()) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("skua: {e:#}");
                return ExitCode::from(64);
            }
        }
    };
    let code = match rt.block_on(run(config, fixtures, args.dev, grpc_from_default)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "Skua stopped.");
            ExitCode::FAILURE
        }
    };
    // Spans still batched go out before the process ends.
    telemetry.shutdown();
    code
}

/// Open-file hard limits below this are warned about: each WebSocket is one descriptor.
const LOW_FD_HARD_LIMIT: u64 = 65_536;

/// Raises the soft open-file limit to the hard one before any socket exists, and logs both.
fn raise_open_file_limit() {
    let Some(r) = skua_edge::fds::raise_soft_limit() else { return };
    let show = |n: u64| if n == u64::MAX { "unlimited".to_owned() } else { n.to_string() };
    let (before, soft, hard) = (show(r.before), show(r.soft), show(r.hard));
    if let Some(e) = &r.error {
        tracing::warn!(before, soft, hard, error = %e, "Could not raise the open-file soft limit to the hard limit.");
    } else {
        tracing::info!(before, soft, hard, "Open-file limit (RLIMIT_NOFILE).");
    }
    if r.hard < LOW_FD_HARD_LIMIT {
        tracing::warn!(
            hard,
            "The open-file hard limit is low: each WebSocket takes one; raise it (ulimit -n, LimitNOFILE=, the \
             container runtime's nofile ulimit)."
        );
    }
}

async fn run(
    config: ServerConfig,
    fixtures: Option<skua_core::RegistryData>,
    dev: bool,
    grpc_from_default: bool,
) -> anyhow::Result<()> {
    raise_open_file_limit();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("while binding {}", config.listen))?;
    if config.grpc_listen.is_none() && grpc_from_default {
        tracing::info!(
            "gRPC control plane off: no admin_key (set --admin-key or SKUA_ADMIN_KEY to serve it on 127.0.0.1:50051)."
        );
    }
    let grpc = match config.grpc_listen {
        None => None,
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => Some(l),
            // Several `--dev` servers (tests, a second terminal) may run at once: only the
            // first gets the default port; the others run without a control plane listener.
            Err(e) if grpc_from_default => {
                tracing::warn!(%addr, error = %e, "Default gRPC listener unavailable; running without it (set --grpc-listen).");
                None
            }
            Err(e) => return Err(e).with_context(|| format!("while binding the gRPC listener {addr}")),
        },
    };
    let shared = [config.bus != node_config::BusConfig::Memory, config.presence != node_config::PresenceConfig::Memory];
    if !config.cluster && shared[0] != shared[1] {
        tracing::warn!(
            bus_shared = shared[0],
            presence_shared = shared[1],
            "Only one of bus and presence is a shared backend: other nodes will not see this node's presence or \
             messages. Set cluster = true (SKUA_CLUSTER) on clustered nodes to make a missing one an error."
        );
    }
    let embedded = node::Embedded::default();
    let backends = node::backends(&config, &embedded).await.context("while connecting the backends")?;
    let registry_store = node::registry_store(&config, &embedded).await?;
    let node = node::RunningNode::launch(&config, backends, registry_store, fixtures.as_ref(), listener, grpc)
        .await
        .context("while starting the node")?;
    if !dev && node.state.registry.load().actor_by_token("dev-token-alice").is_some() {
        // The registry persists in the store: a data directory once used with `--dev` still
        // holds the demo project and its well-known tokens.
        tracing::warn!(
            "The registry holds the --dev demo fixtures (tokens dev-token-…); remove them with \
             `skua admin projects delete demo-project --force` before serving real clients."
        );
    }
    // Handlers first: a SIGHUP (or SIGTERM) sent as soon as the listening line is read must
    // reach them, not the default action.
    let mut signals = Signals::install().context("while installing signal handlers")?;
    // One machine-readable line on stdout, for scripts and the interop suite (`--listen :0`).
    say(&format!("skua listening on {}", node.addr));
    if let Some(addr) = node.grpc_addr {
        say(&format!("skua grpc listening on {addr}"));
    }
    // mqtts first: the interop suite takes the mqtt line as "every MQTT port is known".
    if let Some(addr) = node.mqtt_tls_addr {
        say(&format!("skua mqtts listening on {addr}"));
    }
    if let Some(addr) = node.mqtt_addr {
        say(&format!("skua mqtt listening on {addr}"));
    }
    if let Some(addr) = node.metrics_addr {
        say(&format!("skua metrics listening on {addr}"));
    } else if config.edge.metrics_token.is_none() && !config.listen.ip().is_loopback() && !dev {
        tracing::warn!(
            "/metrics is served on the client listener without a token: anyone who reaches it sees every \
             project id. Set metrics_listen (a private address) or metrics_token."
        );
    }
    if dev {
        let ws = if node.tls.client.is_some() { "wss" } else { "ws" };
        print_dev_banner(ws, node.addr);
        if config.rest.enabled {
            let http = if node.tls.client.is_some() { "https" } else { "http" };
            say(&format!(
                "  REST API: {http}://{}/v1 (project demo-project, API key {})",
                node.addr,
                fixtures::DEV_API_KEY
            ));
        }
        if node.dashboard {
            let http = if node.tls.client.is_some() { "https" } else { "http" };
            let key = if config.admin_key.as_ref().is_some_and(|k| k.0 == DEV_ADMIN_KEY) {
                DEV_ADMIN_KEY
            } else {
                "<your admin_key>"
            };
            say(&format!("  admin dashboard: {http}://{}/admin (sign in with admin key {key})", node.addr));
        }
        if let Some(addr) = node.grpc_addr {
            let key = if config.admin_key.as_ref().is_some_and(|k| k.0 == DEV_ADMIN_KEY) {
                DEV_ADMIN_KEY
            } else {
                "<your admin_key>"
            };
            let server = match &node.tls.grpc {
                Some(t) => format!("https://{addr} --tls-ca {}", t.certs.files().cert.display()),
                None => format!("http://{addr}"),
            };
            say(&format!("  control plane: skua admin --server {server} --admin-key {key} …"));
        }
    }
    signals.wait(&node.tls.reloaders()).await;
    tracing::info!("Draining: closing connections with 1012.");
    if !node.shutdown().await {
        tracing::warn!("Some connections did not close within the shutdown grace.");
    }
    tracing::info!("Stopped.");
    Ok(())
}

/// Writes a line to stdout, ignoring a closed pipe: whoever started us may stop reading, and
/// that must never take the node down.
fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// SIGTERM, SIGINT and SIGHUP, caught from [`Signals::install`] on.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for SIGTERM or SIGINT; on SIGHUP checks the TLS certificate files at once.
    async fn wait(&mut self, reloaders: &[std::sync::Arc<skua_server::tls::CertReloader>]) {
        loop {
            tokio::select! {
                _ = self.term.recv() => return,
                _ = self.int.recv() => return,
                _ = self.hup.recv() => {
                    tracing::info!("SIGHUP: checking the TLS certificate files.");
                    for r in reloaders {
                        r.check();
                    }
                }
            }
        }
    }
}

/// Where `--tls-self-signed` keeps its pair: the SQLite store's directory, else `skua-data`.
fn data_dir(store: &skua_server::config::StoreConfig) -> PathBuf {
    if let skua_server::config::StoreConfig::Url(url) = store
        && let Some(path) = url.strip_prefix("sqlite://")
        && let Some(dir) = std::path::Path::new(path.split('?').next().unwrap_or(path)).parent()
        && !dir.as_os_str().is_empty()
    {
        return dir.to_owned();
    }
    PathBuf::from("skua-data")
}

fn print_dev_banner(ws: &str, addr: std::net::SocketAddr) {
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) + 3600;
    let jwt = jsonwebtoken::EncodingKey::from_secret(fixtures::DEV_JWT_SECRET.as_bytes())
        .ok()
        .and_then(|k| {
            let claims = serde_json_like(exp);
            jsonwebtoken::encode(&jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256), &claims, &k).ok()
        })
        .unwrap_or_default();
    say(&format!(
        "Skua dev mode: WebSocket at {ws}://{addr}/ws (app \"demo\", rooms general, random, ops; lobby online)"
    ));
    say("  token                    actor     type");
    for (t, a, ty) in [
        ("dev-token-alice", "alice", "user"),
        ("dev-token-bob", "bob", "user"),
        ("dev-token-carol", "carol", "device"),
        ("dev-token-agent", "agent-1", "agent"),
        ("dev-token-orchestrator", "orch-1", "orchestrator"),
        ("dev-token-viewer", "viewer", "observer"),
    ] {
        say(&format!("  {t:<24} {a:<9} {ty}"));
    }
    say(&format!("  client token (JWT, HS256 \"{}\", sub alice, 1 h): {jwt}", fixtures::DEV_JWT_SECRET));
}

#[derive(serde::Serialize)]
struct DevClaims {
    sub: &'static str,
    exp: u64,
}

fn serde_json_like(exp: u64) -> DevClaims {
    DevClaims { sub: "alice", exp }
}
