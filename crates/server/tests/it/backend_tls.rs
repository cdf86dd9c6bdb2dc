//! TLS and credentials to the backends (docs/security.md), against private servers started
//! here with a CA made here: a Mosquitto whose only listener is TLS, requires a client
//! certificate and checks a password file; a Redis whose only port is TLS, requires a client
//! certificate and an ACL user. A missing binary skips loudly (fails under CI=true).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use skua_testkit::ports::{self, Listening};
use skua_testkit::process::{free_port, have};
use skua_testkit::{TestServer, frame};

const TOPIC: &str = "demo/general/messages";
/// A password with characters a url must percent-encode.
const PASSWORD: &str = "s3cret:p@ss/w0rd";
const PASSWORD_IN_URL: &str = "s3cret%3Ap%40ss%2Fw0rd";

/// A CA, a server pair for 127.0.0.1/localhost and a client pair, as PEM files in `dir`.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(name: &str) -> Self {
        Self::with_client_expiry(name, None)
    }

    /// A PKI whose client certificate expires on `client_expiry` (year, month, day) instead of
    /// rcgen's default (4096-01-01).
    fn with_client_expiry(name: &str, client_expiry: Option<(i32, u8, u8)>) -> Self {
        let dir = std::env::temp_dir().join(format!("skua-it-pki-{name}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name.push(DnType::CommonName, "skua test CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_key = KeyPair::generate().unwrap();
        std::fs::write(dir.join("ca.pem"), ca.self_signed(&ca_key).unwrap().pem()).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        for (name, sans, usage) in [
            ("server", vec!["localhost".to_owned(), "127.0.0.1".to_owned()], ExtendedKeyUsagePurpose::ServerAuth),
            ("client", vec!["skua-node".to_owned()], ExtendedKeyUsagePurpose::ClientAuth),
        ] {
            let mut params = CertificateParams::new(sans).unwrap();
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = vec![usage];
            if let (Some((y, m, d)), "client") = (client_expiry, name) {
                params.not_after = rcgen::date_time_ymd(y, m, d);
            }
            let key = KeyPair::generate().unwrap();
            std::fs::write(dir.join(format!("{name}.pem")), params.signed_by(&key, &issuer).unwrap().pem()).unwrap();
            std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).unwrap();
        }
        Self { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn arg(&self, file: &str) -> String {
        self.path(file).display().to_string()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A child process killed on drop.
struct Service(Child);

impl Service {
    /// Spawns `program` and waits until it (not another process) listens on `port`; `Err` when
    /// the port was taken after it was picked (another process listens there, or the program
    /// exited), for [`on_free_port`] to try another.
    fn spawn(program: &str, args: &[String], port: u16) -> Result<Self, Listening> {
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        let pid = child.id();
        let s = Self(child);
        match ports::wait_listening(pid, port, Duration::from_secs(10)) {
            Listening::Yes => Ok(s),
            Listening::TimedOut => panic!("{program} did not listen on {port}"),
            lost => Err(lost),
        }
    }
}

/// `start` on a free port, and again on another while the port picked was taken before the
/// service bound it (issue 35).
fn on_free_port(what: &str, mut start: impl FnMut(u16) -> Result<Service, Listening>) -> (Service, u16) {
    for _ in 0..5 {
        let port = free_port();
        match start(port) {
            Ok(s) => return (s, port),
            Err(lost) => eprintln!("{what} on port {port}: {lost:?}; trying another port"),
        }
    }
    panic!("{what} found no free port in 5 tries");
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Mosquitto with one TLS listener that requires a client certificate and the password file's
/// user `skua-node`.
fn mosquitto(pki: &Pki) -> (Service, u16) {
    on_free_port("mosquitto", |port| mosquitto_on(pki, port))
}

/// [`mosquitto`] on `port`.
fn mosquitto_on(pki: &Pki, port: u16) -> Result<Service, Listening> {
    let passwords = pki.path("passwords");
    let made =
        Command::new("mosquitto_passwd").args(["-b", "-c"]).arg(&passwords).args(["skua-node", PASSWORD]).status();
    assert!(made.is_ok_and(|s| s.success()), "mosquitto_passwd failed");
    let conf = pki.path("mosquitto.conf");
    {
        std::fs::write(
            &conf,
            format!(
                "listener {port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true\n\
                 allow_anonymous false\npassword_file {}\npersistence false\n",
                pki.arg("ca.pem"),
                pki.arg("server.pem"),
                pki.arg("server-key.pem"),
                passwords.display()
            ),
        )
        .unwrap();
        Service::spawn("mosquitto", &["-c".into(), conf.display().to_string()], port)
    }
}

/// Redis with only a TLS port that requires a client certificate and the ACL user `skua`.
fn redis(pki: &Pki) -> (Service, u16) {
    on_free_port("redis-server", |port| redis_on(pki, port))
}

/// [`redis`] on `port`.
fn redis_on(pki: &Pki, port: u16) -> Result<Service, Listening> {
    let conf = pki.path("redis.conf");
    {
        std::fs::write(
            &conf,
            format!(
                "port 0\ntls-port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\ntls-cert-file {}\n\
                 tls-key-file {}\ntls-ca-cert-file {}\ntls-auth-clients yes\nuser default off\n\
                 user skua on >{PASSWORD} ~* &* +@all\n",
                pki.arg("server.pem"),
                pki.arg("server-key.pem"),
                pki.arg("ca.pem"),
            ),
        )
        .unwrap();
        Service::spawn("redis-server", &[conf.display().to_string()], port)
    }
}

fn set(path: &Path) -> Option<String> {
    Some(path.display().to_string())
}

#[tokio::test]
async fn a_node_publishes_over_mqtts_and_keeps_presence_in_rediss_with_passwords_and_client_certificates() {
    if !have("mosquitto") || !have("mosquitto_passwd") || !have("redis-server") {
        return;
    }
    let pki = Pki::new("both");
    let (_mosquitto, mqtt_port) = mosquitto(&pki);
    let (_redis, redis_port) = redis(&pki);
    let namespace = format!("tls{}", uuid::Uuid::new_v4().simple());
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.namespace = Some(namespace.clone());
            s.node.bus = Some(format!("mqtts://skua-node:{PASSWORD_IN_URL}@127.0.0.1:{mqtt_port}"));
            s.node.bus_tls_ca = set(&pki.path("ca.pem"));
            s.node.bus_tls_cert = set(&pki.path("client.pem"));
            s.node.bus_tls_key = set(&pki.path("client-key.pem"));
            s.node.presence = Some(format!("rediss://skua:{PASSWORD_IN_URL}@127.0.0.1:{redis_port}/0"));
            s.node.presence_tls_ca = set(&pki.path("ca.pem"));
            s.node.presence_tls_cert = set(&pki.path("client.pem"));
            s.node.presence_tls_key = set(&pki.path("client-key.pem"));
        })
        .spawn()
        .await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    alice.subscribe(TOPIC).await;
    bob.publish_acked(TOPIC, "over tls".into()).await;
    let m = alice.expect("message").await;
    assert_eq!(m.get("data").as_str(), Some("over tls"), "{m:?}");
    // Presence is kept in Redis over TLS.
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"status" => "here"}}).await;
    let joined = alice.expect("presence").await;
    assert_eq!(joined.str("event"), "join", "{joined:?}");
    let _ = server.shutdown().await;
}

/// Puts `pki`'s CA and client pair in `dir` under the names a node is configured with, the way
/// the kubelet updates a Secret volume: written aside, then renamed into place.
fn install_client_files(pki: &Pki, dir: &Path) {
    for file in ["ca.pem", "client.pem", "client-key.pem"] {
        let aside = dir.join(format!(".{file}.new"));
        std::fs::copy(pki.path(file), &aside).unwrap();
        std::fs::rename(&aside, dir.join(file)).unwrap();
    }
}

/// Issue 32, item 7: the backends' CA and client pair are read again when a connection is made
/// again, so a renewal reaches the bus and Redis without a restart. Both servers come back with
/// a new CA that requires a client certificate of that CA: only the renewed files connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_backend_certificates_reach_the_next_connection_without_a_restart() {
    use skua_testkit::http::{Scrape, wait_for_status};
    if !have("mosquitto") || !have("mosquitto_passwd") || !have("redis-server") {
        return;
    }
    let old = Pki::new("renew-old");
    let new = Pki::with_client_expiry("renew-new", Some((2040, 1, 1)));
    let mounted = old.path("mounted");
    std::fs::create_dir_all(&mounted).unwrap();
    install_client_files(&old, &mounted);
    let (mosquitto, mqtt_port) = mosquitto(&old);
    let (redis, redis_port) = redis(&old);
    let namespace = format!("renew{}", uuid::Uuid::new_v4().simple());
    let files = mounted.clone();
    let server = TestServer::builder()
        .settings(move |s| {
            s.edge.namespace = Some(namespace);
            s.edge.node_refresh = Some("300ms".into());
            s.edge.node_ttl = Some("2s".into());
            s.node.bus = Some(format!("mqtts://skua-node:{PASSWORD_IN_URL}@127.0.0.1:{mqtt_port}"));
            s.node.bus_tls_ca = set(&files.join("ca.pem"));
            s.node.bus_tls_cert = set(&files.join("client.pem"));
            s.node.bus_tls_key = set(&files.join("client-key.pem"));
            s.node.presence = Some(format!("rediss://skua:{PASSWORD_IN_URL}@127.0.0.1:{redis_port}/0"));
            s.node.presence_tls_ca = set(&files.join("ca.pem"));
            s.node.presence_tls_cert = set(&files.join("client.pem"));
            s.node.presence_tls_key = set(&files.join("client-key.pem"));
        })
        .spawn()
        .await;
    let within = Duration::from_secs(30);
    wait_for_status(server.addr, "/healthz/backends", 200, within).await;
    let expiry = |m: &Scrape| m.value("skua_certificate_expiry_timestamp_seconds", &[("setting", "bus_tls_cert")]);
    // rcgen's default expiry, 4096-01-01.
    assert_eq!(expiry(&Scrape::of(server.addr).await), 67_090_118_400.0);

    // Renewal: a new CA on both servers, the new client pair on disk; same ports.
    drop((mosquitto, redis));
    install_client_files(&new, &mounted);
    let _mosquitto = mosquitto_on(&new, mqtt_port).expect("mosquitto back on its port");
    let _redis = redis_on(&new, redis_port).expect("redis back on its port");
    let reloads = |m: &Scrape, backend| m.value("skua_backend_tls_reloads_total", &[("backend", backend)]);
    let deadline = std::time::Instant::now() + within;
    loop {
        let m = Scrape::of(server.addr).await;
        if reloads(&m, "bus") == 1.0 && reloads(&m, "presence") == 1.0 {
            // 2040-01-01: the metric reads the files on disk.
            assert_eq!(expiry(&m), 2_208_988_800.0);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the renewed files were not picked up:\n{}", m.text);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for_status(server.addr, "/healthz/backends", 200, within).await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    alice.subscribe(TOPIC).await;
    bob.publish_acked(TOPIC, "after the renewal".into()).await;
    assert_eq!(alice.expect("message").await.str("data"), "after the renewal");
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"status" => "here"}}).await;
    assert_eq!(alice.expect("presence").await.str("event"), "join");
    let _ = server.shutdown().await;
}

#[tokio::test]
async fn the_mqtt_bus_is_refused_without_the_password_or_the_client_certificate() {
    if !have("mosquitto") || !have("mosquitto_passwd") {
        return;
    }
    let pki = Pki::new("mqtt-refused");
    let (_mosquitto, port) = mosquitto(&pki);
    let ca = std::fs::read(pki.path("ca.pem")).unwrap();
    let client = (std::fs::read(pki.path("client.pem")).unwrap(), std::fs::read(pki.path("client-key.pem")).unwrap());
    let attempt = |url: String, client: Option<(Vec<u8>, Vec<u8>)>| {
        let mut config = skua_bus::mqtt::MqttBusConfig::new(url, "refused");
        config.connect_timeout = Duration::from_secs(2);
        config.tls = Some(skua_bus::mqtt::MqttTls { ca_pem: Some(ca.clone()), client_pem: client });
        skua_bus::mqtt::MqttBus::connect(config, skua_core::NodeId::parse("n1").unwrap(), 16)
    };
    let good = format!("mqtts://skua-node:{PASSWORD_IN_URL}@127.0.0.1:{port}");
    assert!(attempt(good.clone(), Some(client.clone())).await.is_ok(), "the right password and certificate");
    let wrong = format!("mqtts://skua-node:wrong@127.0.0.1:{port}");
    assert!(attempt(wrong, Some(client.clone())).await.is_err(), "a wrong password");
    assert!(attempt(good, None).await.is_err(), "no client certificate");
}

#[tokio::test]
async fn redis_presence_is_refused_without_the_password() {
    if !have("redis-server") {
        return;
    }
    let pki = Pki::new("redis-refused");
    let (_redis, port) = redis(&pki);
    let tls = || skua_presence::RedisTls {
        ca_pem: Some(std::fs::read(pki.path("ca.pem")).unwrap()),
        client_pem: Some((
            std::fs::read(pki.path("client.pem")).unwrap(),
            std::fs::read(pki.path("client-key.pem")).unwrap(),
        )),
    };
    let good = format!("rediss://skua:{PASSWORD_IN_URL}@127.0.0.1:{port}/0");
    skua_presence::RedisPresence::connect_with_tls(&good, "refused", Some(tls())).await.expect("the right password");
    let wrong = format!("rediss://skua:wrong@127.0.0.1:{port}/0");
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        skua_presence::RedisPresence::connect_with_tls(&wrong, "x", Some(tls())),
    )
    .await
    .expect("refused within 30 s");
    let e = refused.expect_err("a wrong password");
    assert!(!format!("{e:?}").contains("wrong@"), "{e:?}");
}

/// A Postgres (a fresh cluster run as `postgres` through `setpriv`) that accepts only TLS
/// connections (`hostssl`) with a SCRAM password; `None` when Postgres or its user are missing.
fn postgres(pki: &Pki) -> Option<(Service, u16)> {
    let bin =
        std::fs::read_dir("/usr/lib/postgresql").ok()?.filter_map(Result::ok).map(|e| e.path().join("bin")).next()?;
    let as_postgres = |program: &Path| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]).arg(program);
        c
    };
    let dir = pki.path("pg");
    let data = dir.join("data");
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(dir.join("pwfile"), PASSWORD).ok()?;
    let chown =
        |p: &Path| Command::new("chown").args(["-R", "postgres:postgres"]).arg(p).status().is_ok_and(|s| s.success());
    if !chown(&dir) {
        return None;
    }
    let initdb = as_postgres(&bin.join("initdb"))
        .args(["-A", "scram-sha-256", "-U", "postgres", "--pwfile"])
        .arg(dir.join("pwfile"))
        .arg("-D")
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    assert!(initdb.success(), "initdb failed");
    std::fs::copy(pki.path("server.pem"), data.join("server.crt")).unwrap();
    std::fs::copy(pki.path("server-key.pem"), data.join("server.key")).unwrap();
    std::fs::write(data.join("pg_hba.conf"), "hostssl all all 127.0.0.1/32 scram-sha-256\n").unwrap();
    assert!(chown(&data));
    let mode = Command::new("chmod").arg("600").arg(data.join("server.key")).status();
    assert!(mode.is_ok_and(|s| s.success()));
    Some(on_free_port("postgres", |port| {
        let args: Vec<String> = ["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
            .iter()
            .map(|s| (*s).to_owned())
            .chain([bin.join("postgres").display().to_string(), "-D".into(), data.display().to_string()])
            .chain([
                "-p".into(),
                port.to_string(),
                "-h".into(),
                "127.0.0.1".into(),
                "-k".into(),
                dir.display().to_string(),
            ])
            .chain(["-c".into(), "ssl=on".into()])
            .collect();
        Service::spawn("setpriv", &args, port)
    }))
}

#[tokio::test]
async fn the_store_reaches_postgres_with_verify_full_and_a_password_and_never_shows_it() {
    let pki = Pki::new("pg");
    let Some((_pg, port)) = postgres(&pki) else {
        skua_testkit::skip::skip("Postgres binaries or the postgres user are missing");
        return;
    };
    let ca = pki.arg("ca.pem");
    let url = |user_pass: &str, query: &str| format!("postgres://{user_pass}@127.0.0.1:{port}/postgres?{query}");
    let secure = url(&format!("postgres:{PASSWORD_IN_URL}"), &format!("sslmode=verify-full&sslrootcert={ca}"));
    // Postgres may still be starting up behind its open port: retry briefly.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match skua_server::node::migrate(&secure).await {
            Ok(_) => break,
            Err(e) if std::time::Instant::now() < deadline && e.to_string().contains("starting up") => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("verify-full with the test CA: {e:#}"),
        }
    }
    let refused = [
        url(&format!("postgres:{PASSWORD_IN_URL}"), "sslmode=disable"),
        url(&format!("postgres:{PASSWORD_IN_URL}"), "sslmode=verify-full"),
        url("postgres:wrong-password-hunter2", &format!("sslmode=verify-full&sslrootcert={ca}")),
    ];
    for u in refused {
        let e = skua_server::node::migrate(&u).await.expect_err(&u);
        let shown = format!("{e:#}");
        assert!(!shown.contains("hunter2") && !shown.contains(PASSWORD_IN_URL), "{shown}");
    }
    // Issue 32, item 7: `sslrootcert` is read at every new connection, so a renewed CA file
    // needs no restart. The same url fails with another CA in the file, and works once the
    // file is renewed.
    let other = Pki::new("pg-other");
    let mounted = pki.path("mounted-ca.pem");
    std::fs::copy(other.path("ca.pem"), &mounted).unwrap();
    let renewable =
        url(&format!("postgres:{PASSWORD_IN_URL}"), &format!("sslmode=verify-full&sslrootcert={}", mounted.display()));
    skua_server::node::migrate(&renewable).await.expect_err("a CA that did not sign the server's certificate");
    std::fs::copy(pki.path("ca.pem"), &mounted).unwrap();
    skua_server::node::migrate(&renewable).await.expect("the renewed CA file, read by the next connection");
}
