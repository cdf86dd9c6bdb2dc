//! `skua admin`: the operators' CLI over the control plane's gRPC API. Every command prints a
//! human-readable result, or with `--json` one JSON document on stdout. Errors go to stderr as
//! `skua admin: <gRPC code>: <message>` with exit status 1; usage errors exit 2 (clap).

mod api_keys;
mod json;
mod scopes;

use std::process::ExitCode;

use clap::{Args, Subcommand};
use skua_control::pb;
use skua_control::pb::control_client::ControlClient;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

/// `skua admin` arguments.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The control plane's gRPC address: http://host:port, or https://host:port for a control
    /// plane with TLS (verified against --tls-ca, else the system's roots).
    #[arg(long, env = "SKUA_ADMIN_SERVER", default_value = "http://127.0.0.1:50051", global = true)]
    server: String,
    /// PEM CA certificate(s) the control plane's certificate must chain to (https:// only), e.g.
    /// the dev-cert.pem of `skua serve --dev --tls-self-signed`.
    #[arg(long, env = "SKUA_ADMIN_TLS_CA", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// The name the control plane's certificate must carry [default: the --server host].
    #[arg(long, env = "SKUA_ADMIN_TLS_DOMAIN", global = true)]
    tls_domain: Option<String>,
    /// The admin API key (the server's `admin_key`; `skua serve --dev` prints its dev key).
    #[arg(long, env = "SKUA_ADMIN_KEY", hide_env_values = true, global = true)]
    admin_key: Option<String>,
    /// Print JSON instead of human-readable output.
    #[arg(long, global = true)]
    json: bool,
    /// The project; may be omitted when the server has exactly one.
    #[arg(long, short = 'p', env = "SKUA_ADMIN_PROJECT", global = true, default_value = "")]
    project: String,
    #[command(subcommand)]
    command: Resource,
}

#[derive(Debug, Subcommand)]
enum Resource {
    /// Projects: tenants with limits.
    #[command(subcommand)]
    Projects(ProjectCmd),
    /// Apps: topic lists and rooms.
    #[command(subcommand)]
    Apps(AppCmd),
    /// Rooms of an app.
    #[command(subcommand)]
    Rooms(RoomCmd),
    /// Actors and their access tokens.
    #[command(subcommand)]
    Actors(ActorCmd),
    /// Room grants (private rooms).
    #[command(subcommand)]
    Grants(GrantCmd),
    /// Lobbies.
    #[command(subcommand)]
    Lobbies(LobbyCmd),
    /// Publish a message into a topic (`app/room/topic`) from the server side.
    Publish(PublishArgs),
    /// Open connections.
    #[command(subcommand)]
    Connections(ConnectionCmd),
    /// Project API keys (the REST API's `Authorization: Bearer` keys).
    #[command(subcommand)]
    ApiKeys(api_keys::ApiKeyCmd),
    /// Access scopes: tenant isolation inside a project.
    #[command(subcommand)]
    Scopes(scopes::ScopeCmd),
    /// Webhooks: deliveries that failed for good (dead letters).
    #[command(subcommand)]
    Webhooks(WebhookCmd),
}

#[derive(Debug, Args)]
struct LimitArgs {
    /// Most concurrent connections (per node).
    #[arg(long)]
    max_connections: Option<u32>,
    /// Publishes per calendar month.
    #[arg(long)]
    monthly_quota: Option<u64>,
    /// Publishes per second per connection.
    #[arg(long)]
    rate_limit: Option<u32>,
    /// Largest publish payload in bytes.
    #[arg(long)]
    max_message_size: Option<u32>,
}

impl LimitArgs {
    fn any(&self) -> bool {
        self.max_connections.is_some()
            || self.monthly_quota.is_some()
            || self.rate_limit.is_some()
            || self.max_message_size.is_some()
    }

    fn to_pb(&self) -> pb::ProjectLimits {
        pb::ProjectLimits {
            max_connections: self.max_connections,
            monthly_message_quota: self.monthly_quota,
            rate_limit: self.rate_limit,
            max_message_size: self.max_message_size,
        }
    }
}

#[derive(Debug, Subcommand)]
enum ProjectCmd {
    /// Create a project.
    Create {
        /// Project id.
        id: String,
        /// Display name.
        #[arg(long, default_value = "")]
        name: String,
        /// HS256 secret for client tokens (JWTs).
        #[arg(long, default_value = "")]
        jwt_secret: String,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Show a project.
    Get {
        /// Project id.
        id: String,
    },
    /// List projects.
    List,
    /// Change a project (limits given replace all limits).
    Update {
        /// Project id.
        id: String,
        /// New display name.
        #[arg(long)]
        name: Option<String>,
        /// New JWT secret ("" removes it).
        #[arg(long)]
        jwt_secret: Option<String>,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Delete a project.
    Delete {
        /// Project id.
        id: String,
        /// Also delete its apps and actors.
        #[arg(long)]
        force: bool,
    },
    /// Replace the project's wake secret (signs wake requests, N47); the new one is shown once.
    RotateWakeSecret {
        /// Project id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum AppCmd {
    /// Create an app.
    Create {
        /// App slug (what clients address).
        slug: String,
        /// Internal id [default <project>-<slug>].
        #[arg(long, default_value = "")]
        id: String,
        /// Display name.
        #[arg(long, default_value = "")]
        name: String,
        /// A topic (repeat).
        #[arg(long = "topic")]
        topics: Vec<String>,
        /// A logged topic (repeat; also added as a topic).
        #[arg(long = "logged-topic")]
        logged_topics: Vec<String>,
        /// Let EnsureRoom create rooms.
        #[arg(long)]
        auto_provision: bool,
        /// Room cap [default the server's].
        #[arg(long, default_value_t = 0)]
        max_rooms: u32,
        #[command(flatten)]
        webhooks: WebhookFlags,
    },
    /// Show an app.
    Get {
        /// App id or slug.
        app: String,
    },
    /// List apps.
    List,
    /// Change an app.
    Update {
        /// App id or slug.
        app: String,
        /// New display name.
        #[arg(long)]
        name: Option<String>,
        /// Replace the topics (repeat; with --logged-topic).
        #[arg(long = "topic")]
        topics: Vec<String>,
        /// Logged topics of the replacement list (repeat).
        #[arg(long = "logged-topic")]
        logged_topics: Vec<String>,
        /// Allow or refuse EnsureRoom.
        #[arg(long)]
        auto_provision: Option<bool>,
        /// New room cap (0 = server default).
        #[arg(long)]
        max_rooms: Option<u32>,
        #[command(flatten)]
        webhooks: WebhookFlags,
    },
    /// Set or remove a topic's own webhooks (`topicConfigs.<topic>.webhooks`), which win over
    /// the app's.
    SetTopicWebhooks {
        /// App id or slug.
        app: String,
        /// Topic name.
        topic: String,
        /// Hydration webhook URL of this topic (`onSubscribe`); "" removes it.
        #[arg(long)]
        on_subscribe: Option<String>,
        /// Trigger webhook URL of this topic (`onPublish`); "" removes it.
        #[arg(long)]
        on_publish: Option<String>,
        /// A header sent with the webhooks set by this command, `Name: value` (repeat).
        #[arg(long = "webhook-header")]
        headers: Vec<String>,
        /// Timeout of the webhooks set by this command in ms [default hydration 5000, trigger 10000; at most 30000].
        #[arg(long)]
        webhook_timeout_ms: Option<u32>,
    },
    /// Set or remove a topic's history (`topicConfigs.<topic>.history`, docs/recovery.md):
    /// each room's last `--size` messages, kept `--ttl`.
    SetTopicHistory {
        /// App id or slug.
        app: String,
        /// Topic name.
        topic: String,
        /// Messages kept per room (at least 1).
        #[arg(long)]
        size: Option<u32>,
        /// How long each is kept (`30s`, `10m`, `1h`).
        #[arg(long)]
        ttl: Option<String>,
        /// Remove the topic's history.
        #[arg(long, conflicts_with_all = ["size", "ttl"])]
        off: bool,
    },
    /// Replace the app's webhook secret; the new one is shown once.
    RotateWebhookSecret {
        /// App id or slug.
        app: String,
    },
    /// Delete an app with its rooms, grants and lobbies.
    Delete {
        /// App id or slug.
        app: String,
    },
}

/// The app-level webhooks of `apps create` and `apps update` (N41, docs/webhooks.md).
#[derive(Debug, Args)]
struct WebhookFlags {
    /// App-level hydration webhook URL (`hydrationWebhook`); with `update`, "" removes it.
    #[arg(long)]
    hydration_webhook: Option<String>,
    /// App-level trigger webhook URL (`triggerWebhook`); with `update`, "" removes it.
    #[arg(long)]
    trigger_webhook: Option<String>,
    /// A header sent with the webhooks set by this command, `Name: value` (repeat).
    #[arg(long = "webhook-header")]
    headers: Vec<String>,
    /// Timeout of the webhooks set by this command in ms [default hydration 5000, trigger 10000; at most 30000].
    #[arg(long)]
    webhook_timeout_ms: Option<u32>,
}

/// `Name: value` pairs of `--webhook-header`.
fn webhook_headers(headers: &[String]) -> Result<std::collections::HashMap<String, String>, Failure> {
    headers
        .iter()
        .map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| Failure(format!("--webhook-header {h:?}: write it as 'Name: value'")))
        })
        .collect()
}

/// A webhook target from a URL flag ("" = remove) and the shared header and timeout flags.
fn webhook_target(
    url: Option<String>,
    headers: &[String],
    timeout_ms: Option<u32>,
) -> Result<Option<pb::WebhookTarget>, Failure> {
    let Some(url) = url else { return Ok(None) };
    Ok(Some(pb::WebhookTarget { url, headers: webhook_headers(headers)?, timeout_ms: timeout_ms.unwrap_or(0) }))
}

impl WebhookFlags {
    fn targets(self) -> Result<(Option<pb::WebhookTarget>, Option<pb::WebhookTarget>), Failure> {
        if self.hydration_webhook.is_none()
            && self.trigger_webhook.is_none()
            && (!self.headers.is_empty() || self.webhook_timeout_ms.is_some())
        {
            return Err(Failure(
                "--webhook-header and --webhook-timeout-ms apply to --hydration-webhook or --trigger-webhook; give one"
                    .into(),
            ));
        }
        Ok((
            webhook_target(self.hydration_webhook, &self.headers, self.webhook_timeout_ms)?,
            webhook_target(self.trigger_webhook, &self.headers, self.webhook_timeout_ms)?,
        ))
    }
}

#[derive(Debug, Subcommand)]
enum RoomCmd {
    /// Create a static room.
    Create {
        /// App id or slug.
        app: String,
        /// Room slug.
        slug: String,
        /// Display name.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Get or create (dynamic) a room; needs the app's auto-provisioning.
    Ensure {
        /// App id or slug.
        app: String,
        /// Room slug.
        slug: String,
    },
    /// Show a room.
    Get {
        /// App id or slug.
        app: String,
        /// Room slug.
        slug: String,
    },
    /// List an app's rooms.
    List {
        /// App id or slug.
        app: String,
        /// Page size [default the server's].
        #[arg(long, default_value_t = 0)]
        page_size: u32,
        /// Page token from a previous page.
        #[arg(long, default_value = "")]
        page_token: String,
    },
    /// Rename a room.
    Update {
        /// App id or slug.
        app: String,
        /// Room slug.
        slug: String,
        /// New display name.
        #[arg(long)]
        name: String,
    },
    /// Delete a room and its grants.
    Delete {
        /// App id or slug.
        app: String,
        /// Room slug.
        slug: String,
    },
}

#[derive(Debug, Subcommand)]
enum ActorCmd {
    /// Create an actor; prints its access token once.
    Create {
        /// Actor id [default generated].
        #[arg(default_value = "")]
        id: String,
        /// Actor type: user, device, agent, orchestrator, observer, server, service, session.
        #[arg(long = "type")]
        actor_type: String,
        /// Display name.
        #[arg(long, default_value = "")]
        name: String,
        /// Per-connection publish rate override.
        #[arg(long, default_value_t = 0)]
        rate_limit: u32,
    },
    /// Show an actor.
    Get {
        /// Actor id.
        id: String,
    },
    /// List actors.
    List {
        /// Page size [default the server's].
        #[arg(long, default_value_t = 0)]
        page_size: u32,
        /// Page token from a previous page.
        #[arg(long, default_value = "")]
        page_token: String,
    },
    /// Deactivate an actor (its connections close 4001).
    Deactivate {
        /// Actor id.
        id: String,
    },
    /// Reactivate an actor.
    Activate {
        /// Actor id.
        id: String,
    },
    /// Delete an actor with its tokens and grants.
    Delete {
        /// Actor id.
        id: String,
    },
    /// Replace the actor's access tokens by a new one; prints it once.
    Rotate {
        /// Actor id.
        id: String,
    },
    /// Close every connection of the actor, on every node.
    Disconnect {
        /// Actor id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum GrantCmd {
    /// Grant access to a room (the first grant makes it private).
    Create {
        /// App id or slug.
        app: String,
        /// Room slug.
        room: String,
        /// The actor granted.
        #[arg(long, default_value = "", conflicts_with = "actor_type")]
        actor: String,
        /// Every actor of this type.
        #[arg(long, default_value = "")]
        actor_type: String,
        /// subscribe, publish or pubSub.
        #[arg(long)]
        permission: String,
        /// Only this topic (repeat).
        #[arg(long = "topic")]
        topics: Vec<String>,
        /// Expiry, unix seconds.
        #[arg(long, default_value_t = 0)]
        expires_at: u64,
    },
    /// List a room's grants.
    List {
        /// App id or slug.
        app: String,
        /// Room slug.
        room: String,
    },
    /// Revoke a grant.
    Delete {
        /// Grant id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum LobbyCmd {
    /// Create a lobby.
    Create {
        /// Lobby slug.
        slug: String,
        /// App id or slug.
        #[arg(long)]
        app: String,
        /// A covered room (repeat).
        #[arg(long = "room")]
        rooms: Vec<String>,
        /// An allowed actor (repeat).
        #[arg(long = "allow-actor")]
        allowed_actors: Vec<String>,
        /// An allowed actor type (repeat).
        #[arg(long = "allow-type")]
        allowed_types: Vec<String>,
    },
    /// Show a lobby.
    Get {
        /// Lobby slug.
        slug: String,
    },
    /// List lobbies.
    List,
    /// Replace a lobby's rooms.
    SetRooms {
        /// Lobby slug.
        slug: String,
        /// A covered room (repeat; none = empty).
        #[arg(long = "room")]
        rooms: Vec<String>,
    },
    /// Delete a lobby.
    Delete {
        /// Lobby slug.
        slug: String,
    },
}

#[derive(Debug, Args)]
struct PublishArgs {
    /// `app/room/topic`.
    topic: String,
    /// The payload as JSON (sent as the equivalent MessagePack).
    #[arg(long, conflicts_with = "data_hex")]
    data: Option<String>,
    /// The payload as hex-encoded packed MessagePack.
    #[arg(long)]
    data_hex: Option<String>,
    /// Filter key.
    #[arg(long, default_value = "")]
    filter: String,
    /// Actor subscribers see as `from` [default server].
    #[arg(long = "from", default_value = "")]
    from_actor: String,
    /// Retain as the topic's last message.
    #[arg(long)]
    retain: bool,
    /// Idempotency key: a repeat within idempotency_window is answered as a duplicate and not published.
    #[arg(long, default_value = "")]
    idempotency_key: String,
}

#[derive(Debug, Subcommand)]
enum ConnectionCmd {
    /// List open connections (of the node serving the call).
    List {
        /// Only this actor's.
        #[arg(long, default_value = "")]
        actor: String,
    },
}

#[derive(Debug, Subcommand)]
enum WebhookCmd {
    /// Deliveries that failed after their last retry (dead letters).
    #[command(subcommand)]
    Failures(FailureCmd),
}

#[derive(Debug, Subcommand)]
enum FailureCmd {
    /// List the project's failures, oldest first.
    List {
        /// Only those after this id (paging).
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// At most this many [default: the server's max_page_size].
        #[arg(long, default_value_t = 0)]
        limit: u32,
    },
    /// Post failures again (one attempt each, same deliveryId); delivered ones are deleted.
    Retry {
        /// Delivery ids.
        delivery_ids: Vec<String>,
        /// Every failure of the project (at most max_page_size per call) instead.
        #[arg(long, conflicts_with = "delivery_ids")]
        all: bool,
    },
    /// Delete failures.
    Purge {
        /// Delivery ids.
        delivery_ids: Vec<String>,
        /// Every failure of the project instead.
        #[arg(long, conflicts_with = "delivery_ids")]
        all: bool,
    },
}

/// Runs `skua admin …`.
pub fn run(args: AdminArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("skua admin: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(execute(args)) {
        Ok(out) => {
            // Not `println!`: it panics when stdout is a closed pipe (`skua admin … | head`).
            use std::io::Write as _;
            match writeln!(std::io::stdout().lock(), "{out}") {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("skua admin: cannot write the output: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("skua admin: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A failure to report: the message is the whole line after `skua admin: `.
#[derive(Debug)]
struct Failure(String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        Self(format!("{:?}: {}", s.code(), s.message()))
    }
}

type Client = ControlClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>;

/// Adds the admin key to every call.
#[derive(Clone)]
struct Bearer(Option<MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// The client TLS of an `https://` server: the given CA, else the system's roots.
fn client_tls(args: &AdminArgs) -> Result<Option<tonic::transport::ClientTlsConfig>, Failure> {
    let https = args.server.to_ascii_lowercase().starts_with("https://");
    if !https {
        if args.tls_ca.is_some() || args.tls_domain.is_some() {
            return Err(Failure("--tls-ca and --tls-domain need an https:// --server".into()));
        }
        return Ok(None);
    }
    let mut tls = tonic::transport::ClientTlsConfig::new();
    tls = match &args.tls_ca {
        Some(path) => {
            let pem =
                std::fs::read(path).map_err(|e| Failure(format!("cannot read --tls-ca {}: {e}", path.display())))?;
            tls.ca_certificate(tonic::transport::Certificate::from_pem(pem))
        }
        None => tls.with_native_roots(),
    };
    if let Some(domain) = &args.tls_domain {
        tls = tls.domain_name(domain.clone());
    }
    Ok(Some(tls))
}

async fn connect(args: &AdminArgs) -> Result<Client, Failure> {
    crate::tls::install_provider();
    let mut endpoint = Channel::from_shared(args.server.clone())
        .map_err(|e| Failure(format!("invalid --server {:?}: {e}", args.server)))?
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(30));
    if let Some(tls) = client_tls(args)? {
        endpoint = endpoint.tls_config(tls).map_err(|e| Failure(format!("TLS settings: {e}")))?;
    }
    let channel = endpoint.connect().await.map_err(|e| {
        Failure(format!("cannot reach the control plane at {}: {}", args.server, crate::errors::error_chain(&e)))
    })?;
    let key = match args.admin_key.as_deref() {
        None | Some("") => None,
        Some(k) => {
            Some(format!("Bearer {k}").parse().map_err(|_| Failure("the admin key must be printable ASCII".into()))?)
        }
    };
    Ok(ControlClient::with_interceptor(channel, Bearer(key)))
}

fn topics(plain: &[String], logged: &[String]) -> Vec<pb::Topic> {
    let mut out: Vec<pb::Topic> =
        plain.iter().map(|t| pb::Topic { name: t.clone(), logged: logged.contains(t), ..Default::default() }).collect();
    for t in logged.iter().filter(|t| !plain.contains(t)) {
        out.push(pb::Topic { name: t.clone(), logged: true, ..Default::default() });
    }
    out
}

async fn execute(args: AdminArgs) -> Result<String, Failure> {
    let mut c = connect(&args).await?;
    let project = args.project.clone();
    let out = json::Out { json: args.json };
    Ok(match args.command {
        Resource::Projects(cmd) => match cmd {
            ProjectCmd::Create { id, name, jwt_secret, limits } => {
                let r = pb::CreateProjectRequest { id, name, jwt_secret, limits: Some(limits.to_pb()) };
                out.project(&c.create_project(r).await?.into_inner())
            }
            ProjectCmd::Get { id } => {
                out.project(&c.get_project(pb::GetProjectRequest { project_id: id }).await?.into_inner())
            }
            ProjectCmd::List => out.projects(&c.list_projects(pb::ListProjectsRequest {}).await?.into_inner().projects),
            ProjectCmd::Update { id, name, jwt_secret, limits } => {
                let limits = limits.any().then(|| limits.to_pb());
                let r = pb::UpdateProjectRequest { project_id: id, name, jwt_secret, limits };
                out.project(&c.update_project(r).await?.into_inner())
            }
            ProjectCmd::Delete { id, force } => {
                out.deleted(&c.delete_project(pb::DeleteProjectRequest { project_id: id, force }).await?.into_inner())
            }
            ProjectCmd::RotateWakeSecret { id } => {
                let r = pb::RotateWakeSecretRequest { project_id: id };
                out.project(&c.rotate_wake_secret(r).await?.into_inner())
            }
        },
        Resource::Apps(cmd) => match cmd {
            AppCmd::Create { slug, id, name, topics: t, logged_topics, auto_provision, max_rooms, webhooks } => {
                let (hydration_webhook, trigger_webhook) = webhooks.targets()?;
                let r = pb::CreateAppRequest {
                    project_id: project,
                    slug,
                    id,
                    name,
                    topics: topics(&t, &logged_topics),
                    auto_provision_rooms: auto_provision,
                    max_rooms,
                    hydration_webhook,
                    trigger_webhook,
                };
                out.app(&c.create_app(r).await?.into_inner())
            }
            AppCmd::Get { app } => {
                out.app(&c.get_app(pb::GetAppRequest { project_id: project, app }).await?.into_inner())
            }
            AppCmd::List => {
                out.apps(&c.list_apps(pb::ListAppsRequest { project_id: project }).await?.into_inner().apps)
            }
            AppCmd::Update { app, name, topics: t, logged_topics, auto_provision, max_rooms, webhooks } => {
                let (hydration_webhook, trigger_webhook) = webhooks.targets()?;
                let topics = if t.is_empty() && logged_topics.is_empty() {
                    None
                } else {
                    // A replaced topic list keeps the webhooks of the topics that stay.
                    let current =
                        c.get_app(pb::GetAppRequest { project_id: project.clone(), app: app.clone() }).await?;
                    let mut list = topics(&t, &logged_topics);
                    for topic in &mut list {
                        if let Some(old) = current.get_ref().topics.iter().find(|o| o.name == topic.name) {
                            topic.webhooks.clone_from(&old.webhooks);
                            topic.webhook.clone_from(&old.webhook);
                            topic.history = old.history;
                        }
                    }
                    Some(pb::TopicList { topics: list })
                };
                let r = pb::UpdateAppRequest {
                    project_id: project,
                    app,
                    name,
                    topics,
                    auto_provision_rooms: auto_provision,
                    max_rooms,
                    hydration_webhook,
                    trigger_webhook,
                };
                out.app(&c.update_app(r).await?.into_inner())
            }
            AppCmd::SetTopicWebhooks { app, topic, on_subscribe, on_publish, headers, webhook_timeout_ms } => {
                if on_subscribe.is_none() && on_publish.is_none() {
                    return Err(Failure("give --on-subscribe or --on-publish (\"\" removes one)".into()));
                }
                let on_subscribe = webhook_target(on_subscribe, &headers, webhook_timeout_ms)?;
                let on_publish = webhook_target(on_publish, &headers, webhook_timeout_ms)?;
                let current =
                    c.get_app(pb::GetAppRequest { project_id: project.clone(), app: app.clone() }).await?.into_inner();
                let mut list = current.topics;
                let entry = list
                    .iter_mut()
                    .find(|t| t.name == topic)
                    .ok_or_else(|| Failure(format!("app {} has no topic {topic:?}", current.slug)))?;
                let hooks = entry.webhooks.get_or_insert_with(Default::default);
                if let Some(w) = on_subscribe {
                    hooks.on_subscribe = Some(w).filter(|w| !w.url.is_empty());
                }
                if let Some(w) = on_publish {
                    hooks.on_publish = Some(w).filter(|w| !w.url.is_empty());
                }
                let r = pb::UpdateAppRequest {
                    project_id: project,
                    app,
                    topics: Some(pb::TopicList { topics: list }),
                    ..Default::default()
                };
                out.app(&c.update_app(r).await?.into_inner())
            }
            AppCmd::SetTopicHistory { app, topic, size, ttl, off } => {
                let history = match (off, size, ttl) {
                    (true, _, _) => None,
                    (false, Some(size), Some(ttl)) => {
                        let ttl = crate::duration::parse(&ttl).map_err(|e| Failure(format!("--ttl: {e}")))?;
                        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
                        Some(pb::TopicHistory { size, ttl_ms })
                    }
                    _ => return Err(Failure("give --size and --ttl, or --off".into())),
                };
                let current =
                    c.get_app(pb::GetAppRequest { project_id: project.clone(), app: app.clone() }).await?.into_inner();
                let mut list = current.topics;
                let entry = list
                    .iter_mut()
                    .find(|t| t.name == topic)
                    .ok_or_else(|| Failure(format!("app {} has no topic {topic:?}", current.slug)))?;
                entry.history = history;
                let r = pb::UpdateAppRequest {
                    project_id: project,
                    app,
                    topics: Some(pb::TopicList { topics: list }),
                    ..Default::default()
                };
                out.app(&c.update_app(r).await?.into_inner())
            }
            AppCmd::RotateWebhookSecret { app } => {
                let r = pb::RotateWebhookSecretRequest { project_id: project, app };
                out.app(&c.rotate_webhook_secret(r).await?.into_inner())
            }
            AppCmd::Delete { app } => {
                out.deleted(&c.delete_app(pb::DeleteAppRequest { project_id: project, app }).await?.into_inner())
            }
        },
        Resource::Rooms(cmd) => match cmd {
            RoomCmd::Create { app, slug, name } => {
                let r = pb::CreateRoomRequest { project_id: project, app, slug, name };
                out.room(&c.create_room(r).await?.into_inner())
            }
            RoomCmd::Ensure { app, slug } => {
                let r = pb::EnsureRoomRequest { project_id: project, app, slug, name: String::new() };
                out.ensured(&c.ensure_room(r).await?.into_inner())
            }
            RoomCmd::Get { app, slug } => {
                out.room(&c.get_room(pb::GetRoomRequest { project_id: project, app, slug }).await?.into_inner())
            }
            RoomCmd::List { app, page_size, page_token } => {
                let r = pb::ListRoomsRequest { project_id: project, app, page_size, page_token };
                out.rooms(&c.list_rooms(r).await?.into_inner())
            }
            RoomCmd::Update { app, slug, name } => {
                let r = pb::UpdateRoomRequest { project_id: project, app, slug, name: Some(name) };
                out.room(&c.update_room(r).await?.into_inner())
            }
            RoomCmd::Delete { app, slug } => out
                .deleted(&c.delete_room(pb::DeleteRoomRequest { project_id: project, app, slug }).await?.into_inner()),
        },
        Resource::Actors(cmd) => match cmd {
            ActorCmd::Create { id, actor_type, name, rate_limit } => {
                let r = pb::CreateActorRequest { project_id: project, id, actor_type, name, rate_limit };
                out.created_actor(&c.create_actor(r).await?.into_inner())
            }
            ActorCmd::Get { id } => out.actor(&c.get_actor(pb::GetActorRequest { actor_id: id }).await?.into_inner()),
            ActorCmd::List { page_size, page_token } => {
                let r = pb::ListActorsRequest { project_id: project, page_size, page_token };
                out.actors(&c.list_actors(r).await?.into_inner())
            }
            ActorCmd::Deactivate { id } => {
                out.actor(&c.deactivate_actor(pb::ActorRef { actor_id: id }).await?.into_inner())
            }
            ActorCmd::Activate { id } => {
                out.actor(&c.activate_actor(pb::ActorRef { actor_id: id }).await?.into_inner())
            }
            ActorCmd::Delete { id } => out.deleted(&c.delete_actor(pb::ActorRef { actor_id: id }).await?.into_inner()),
            ActorCmd::Rotate { id } => {
                out.created_actor(&c.rotate_actor_token(pb::ActorRef { actor_id: id }).await?.into_inner())
            }
            ActorCmd::Disconnect { id } => {
                out.disconnected(&c.disconnect_actor(pb::ActorRef { actor_id: id }).await?.into_inner())
            }
        },
        Resource::Grants(cmd) => match cmd {
            GrantCmd::Create { app, room, actor, actor_type, permission, topics, expires_at } => {
                let r = pb::CreateGrantRequest {
                    project_id: project,
                    app,
                    room,
                    actor_id: actor,
                    actor_type,
                    permission,
                    topics,
                    expires_at,
                };
                out.grant(&c.create_grant(r).await?.into_inner())
            }
            GrantCmd::List { app, room } => {
                let r = pb::ListGrantsRequest { project_id: project, app, room };
                out.grants(&c.list_grants(r).await?.into_inner().grants)
            }
            GrantCmd::Delete { id } => {
                out.deleted(&c.delete_grant(pb::DeleteGrantRequest { grant_id: id }).await?.into_inner())
            }
        },
        Resource::Lobbies(cmd) => match cmd {
            LobbyCmd::Create { slug, app, rooms, allowed_actors, allowed_types } => {
                let r = pb::CreateLobbyRequest {
                    project_id: project,
                    slug,
                    app,
                    rooms,
                    allowed_actors,
                    allowed_actor_types: allowed_types,
                };
                out.lobby(&c.create_lobby(r).await?.into_inner())
            }
            LobbyCmd::Get { slug } => {
                out.lobby(&c.get_lobby(pb::GetLobbyRequest { project_id: project, slug }).await?.into_inner())
            }
            LobbyCmd::List => {
                out.lobbies(&c.list_lobbies(pb::ListLobbiesRequest { project_id: project }).await?.into_inner().lobbies)
            }
            LobbyCmd::SetRooms { slug, rooms } => {
                let r = pb::SetLobbyRoomsRequest { project_id: project, slug, rooms };
                out.lobby(&c.set_lobby_rooms(r).await?.into_inner())
            }
            LobbyCmd::Delete { slug } => {
                out.deleted(&c.delete_lobby(pb::DeleteLobbyRequest { project_id: project, slug }).await?.into_inner())
            }
        },
        Resource::Publish(p) => {
            let data = match (&p.data, &p.data_hex) {
                (Some(j), None) => json::msgpack_of_json(j).map_err(Failure)?,
                (None, Some(h)) => json::unhex(h).ok_or_else(|| Failure("--data-hex is not hex".into()))?,
                _ => return Err(Failure("give --data JSON or --data-hex HEX".into())),
            };
            let r = pb::PublishRequest {
                project_id: project,
                topic: p.topic,
                data,
                filter: p.filter,
                from_actor: p.from_actor,
                retain: p.retain,
                idempotency_key: p.idempotency_key,
            };
            out.published(&c.publish(r).await?.into_inner())
        }
        Resource::Connections(ConnectionCmd::List { actor }) => {
            let r = pb::ListConnectionsRequest { project_id: project, actor_id: actor };
            out.connections(&c.list_connections(r).await?.into_inner().connections)
        }
        Resource::ApiKeys(cmd) => api_keys::execute(&mut c, project, &out, cmd).await?,
        Resource::Scopes(cmd) => scopes::execute(&mut c, project, &out, cmd).await?,
        Resource::Webhooks(WebhookCmd::Failures(cmd)) => match cmd {
            FailureCmd::List { after, limit } => {
                let r = pb::ListWebhookFailuresRequest { project_id: project, after_id: after, limit };
                out.webhook_failures(&c.list_webhook_failures(r).await?.into_inner().failures)
            }
            FailureCmd::Retry { delivery_ids, all } => {
                let r = pb::RetryWebhookFailuresRequest { project_id: project, delivery_ids, all };
                out.webhook_retries(&c.retry_webhook_failures(r).await?.into_inner().results)
            }
            FailureCmd::Purge { delivery_ids, all } => {
                let r = pb::PurgeWebhookFailuresRequest { project_id: project, delivery_ids, all };
                out.webhook_purged(&c.purge_webhook_failures(r).await?.into_inner())
            }
        },
    })
}
