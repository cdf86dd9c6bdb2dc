//! The `skua` binary's outside contract (shared/CONTRACT.md): flags, `SKUA_*` variables, the
//! config file, exit statuses, and SIGTERM draining. These spawn the real binary; everything
//! else is tested in process (tests/it).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use skua_testkit::WsClient;

fn skua() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_skua"));
    c.env_remove("RUST_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("SKUA_") {
            c.env_remove(k);
        }
    }
    c
}

fn print_config(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = skua();
    c.arg("serve").args(args).arg("--print-config");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run skua");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn every_single_node_flag_exists_and_is_applied() {
    let (code, out, err) = print_config(
        &[
            "--listen",
            "127.0.0.1:9999",
            "--dev",
            "--idle-timeout",
            "5s",
            "--rate-limit",
            "7",
            "--max-message-size",
            "1234",
            "--node-id",
            "n-1",
            "--namespace",
            "ns2",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    for want in [
        "127.0.0.1:9999",
        "idle_timeout: 5s",
        "rate_limit: 7",
        "max_message_size: 1234",
        "\"n-1\"",
        "namespace: \"ns2\"",
    ] {
        assert!(out.contains(want), "missing {want:?} in {out}");
    }
}

#[test]
fn environment_variables_set_the_same_settings_and_flags_win() {
    let (code, out, err) = print_config(
        &["--rate-limit", "9"],
        &[
            ("SKUA_LISTEN", "127.0.0.1:7777"),
            ("SKUA_IDLE_TIMEOUT", "2m"),
            ("SKUA_RATE_LIMIT", "3"),
            ("SKUA_NAMESPACE", "envns"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("127.0.0.1:7777") && out.contains("idle_timeout: 120s") && out.contains("namespace: \"envns\""),
        "{out}"
    );
    assert!(out.contains("rate_limit: 9"), "flags beat the environment: {out}");
}

#[test]
fn config_file_is_read_and_unknown_keys_or_flags_exit_2() {
    let dir = std::env::temp_dir().join(format!("skua-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, "rate_limit = 11\nidle_timeout = \"30s\"\n").unwrap();
    let (code, out, err) = print_config(&["--config", good.to_str().unwrap()], &[("SKUA_RATE_LIMIT", "12")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("idle_timeout: 30s") && out.contains("rate_limit: 12"), "env beats the file: {out}");

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "rate_limt = 11\n").unwrap();
    let (code, _, err) = print_config(&["--config", bad.to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("rate_limt"), "names the unknown key: {err}");

    let (code, _, err) = print_config(&["--no-such-flag"], &[]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = print_config(&["--idle-timeout", "soon"], &[]);
    assert_eq!(code, 64, "invalid values exit EX_USAGE: {err}");
    assert!(err.contains("idle_timeout"), "{err}");

    let fixtures = dir.join("fixtures.toml");
    std::fs::write(&fixtures, "[[actors]]\nid = \"x\"\nproject = \"nope\"\ntype = \"user\"\n").unwrap();
    let mut c = skua();
    let out = c.args(["serve", "--listen", "127.0.0.1:0", "--fixtures", fixtures.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown project"));
}

#[tokio::test]
async fn sigterm_closes_sockets_with_1012_and_exits_zero() {
    let mut child = skua()
        .args([
            "serve",
            "--dev",
            "--listen",
            "127.0.0.1:0",
            "--shutdown-grace",
            "5s",
            "--store",
            "memory",
            "--grpc-listen",
            "",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped)
        .expect("spawn skua");
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut l = String::new();
        BufReader::new(stdout).read_line(&mut l).map(|_| l)
    })
    .await
    .unwrap()
    .unwrap();
    let addr =
        line.trim().strip_prefix("skua listening on ").unwrap_or_else(|| panic!("first line: {line:?}")).to_owned();
    let mut alice = WsClient::connect(&format!("ws://{addr}/ws")).await;
    alice.auth_ok("dev-token-alice", 2).await;
    alice.subscribe("demo/general/messages").await;
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    assert_eq!(alice.expect_close().await, (1012, "server_restart".to_owned()));
    let exit = tokio::time::timeout(Duration::from_secs(10), tokio::task::spawn_blocking(move || child.wait()))
        .await
        .expect("skua exits within its grace")
        .unwrap()
        .unwrap();
    assert_eq!(exit.code(), Some(0));
}

/// A `skua serve --dev` child with a gRPC listener on port 0: (child, ws address, grpc address).
async fn dev_server_with_grpc(extra: &[&str]) -> (Reaped, String, String) {
    let mut child = skua()
        .args(["serve", "--dev", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--store", "memory"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped)
        .expect("spawn skua");
    let stdout = child.stdout.take().unwrap();
    let (ws, grpc) = tokio::task::spawn_blocking(move || {
        let mut r = BufReader::new(stdout);
        let mut first = String::new();
        let mut second = String::new();
        r.read_line(&mut first).unwrap();
        r.read_line(&mut second).unwrap();
        // Keep draining so the child never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
        (first, second)
    })
    .await
    .unwrap();
    let ws = ws.trim().strip_prefix("skua listening on ").unwrap_or_else(|| panic!("first line: {ws:?}")).to_owned();
    let grpc = grpc
        .trim()
        .strip_prefix("skua grpc listening on ")
        .unwrap_or_else(|| panic!("second line: {grpc:?}"))
        .to_owned();
    (child, ws, grpc)
}

/// Runs `skua admin --server http://grpc --admin-key skua-dev-admin-key ARGS`: (status, stdout, stderr).
fn admin(grpc: &str, args: &[&str]) -> (i32, String, String) {
    let out = skua()
        .args(["admin", "--server", &format!("http://{grpc}"), "--admin-key", "skua-dev-admin-key"])
        .args(args)
        .output()
        .expect("run skua admin");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    )
}

fn stop(mut child: Reaped) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// A `skua` child that is killed when dropped, so a failed assertion never leaves it running
/// after the test (issue 35).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

#[tokio::test]
async fn admin_provisions_a_room_and_an_actor_that_a_client_then_uses() {
    let (child, ws, grpc) = dev_server_with_grpc(&[]).await;
    let (code, out, err) = admin(&grpc, &["rooms", "create", "demo", "lobby-7"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "room demo/lobby-7 (static, public)");
    let (code, out, err) = admin(&grpc, &["actors", "create", "--type", "agent", "worker-3"]);
    assert_eq!(code, 0, "{err}");
    let token = out.lines().last().unwrap().trim().to_owned();
    assert!(out.starts_with("actor worker-3 (agent, project demo-project)"), "{out}");
    assert!(token.starts_with("at_live_"), "{out}");

    let mut worker = WsClient::connect(&format!("ws://{ws}/ws")).await;
    assert_eq!(worker.auth_ok(&token, 2).await.str("actorTokenId"), "worker-3");
    worker.subscribe("demo/lobby-7/tasks").await;
    let mut bob = WsClient::connect(&format!("ws://{ws}/ws")).await;
    bob.auth_ok("dev-token-bob", 2).await;
    bob.publish_acked("demo/lobby-7/tasks", "job-1".into()).await;
    assert_eq!(worker.expect("message").await.str("topic"), "demo/lobby-7/tasks");

    // --json: one document with the proto's field names.
    let (code, out, err) = admin(&grpc, &["--json", "rooms", "list", "demo"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let slugs: Vec<&str> = v["rooms"].as_array().unwrap().iter().map(|r| r["slug"].as_str().unwrap()).collect();
    assert_eq!(slugs, ["general", "lobby-7", "ops", "random"]);
    assert_eq!(v["rooms"][2]["private"], serde_json::Value::Bool(true));
    let (_, out, _) = admin(&grpc, &["--json", "actors", "get", "worker-3"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["actor_type"].as_str(), v["active"].as_bool()), (Some("agent"), Some(true)));

    // Human output of a few more commands, and server-side publish.
    let (code, out, _) =
        admin(&grpc, &["grants", "create", "demo", "lobby-7", "--actor", "worker-3", "--permission", "pubSub"]);
    assert_eq!(code, 0);
    assert!(out.contains("actor worker-3 may pubSub in room lobby-7"), "{out}");
    let (code, out, err) = admin(&grpc, &["publish", "demo/lobby-7/tasks", "--data", r#"{"job": 2}"#]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("published at "), "{out}");
    let m = worker.expect("message").await;
    assert_eq!(m.str("from"), "server");
    let (code, out, _) = admin(&grpc, &["connections", "list", "--actor", "worker-3"]);
    assert_eq!(code, 0);
    assert!(out.lines().nth(1).is_some_and(|l| l.contains("worker-3")), "{out}");
    let (code, out, _) = admin(&grpc, &["actors", "deactivate", "worker-3"]);
    assert_eq!(code, 0);
    assert!(out.contains("DEACTIVATED"), "{out}");
    assert_eq!(worker.expect_close().await, (4001, "token_revoked".to_owned()));
    stop(child);
}

#[tokio::test]
async fn admin_reports_grpc_errors_with_their_code_and_exits_1() {
    let (child, _ws, grpc) = dev_server_with_grpc(&[]).await;
    let (code, _, err) = admin(&grpc, &["rooms", "create", "demo", "general"]);
    assert_eq!(code, 1);
    assert_eq!(err, "skua admin: AlreadyExists: room \"general\" already exists in app \"demo\"");
    let (code, _, err) = admin(&grpc, &["rooms", "ensure", "demo", "x"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("skua admin: FailedPrecondition: "), "{err}");
    let (code, _, err) = admin(&grpc, &["actors", "get", "nobody"]);
    assert_eq!((code, err.as_str()), (1, "skua admin: NotFound: actor \"nobody\" not found"));
    let (code, _, err) = admin(&grpc, &["actors", "create", "--type", "robot", "r"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("skua admin: InvalidArgument: actor_type \"robot\" is invalid"), "{err}");
    let out = skua()
        .args([
            "admin",
            "--server",
            &format!("http://{grpc}"),
            "--admin-key",
            "wrong-key-wrong-key",
            "projects",
            "list",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Unauthenticated: invalid admin API key"));
    let out = skua().args(["admin", "--server", "http://127.0.0.1:1", "projects", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the control plane"));
    let out = skua().args(["admin", "rooms", "frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
    stop(child);
}

#[test]
fn grpc_needs_an_admin_key_outside_dev_and_the_key_is_masked() {
    let out = skua()
        .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--store", "memory"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("admin_key: required when grpc_listen is set"));
    let (code, out, err) =
        print_config(&["--grpc-listen", "127.0.0.1:7000"], &[("SKUA_ADMIN_KEY", "a-very-secret-admin-key")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("127.0.0.1:7000") && out.contains("AdminKey(<redacted>)"), "{out}");
    assert!(!out.contains("a-very-secret-admin-key"));
    let (code, _, err) = print_config(&["--admin-key", "short"], &[]);
    assert_eq!(code, 64);
    assert!(err.contains("at least 16 characters"), "{err}");
    let (code, out, _) = print_config(&["--revalidate-interval", "30s", "--max-rooms-per-app", "7"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("revalidate_interval: 30s") && out.contains("max_rooms_per_app: 7"), "{out}");
}

#[test]
fn an_unreadable_certificate_stops_startup_with_status_2_before_binding() {
    let out = skua()
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "memory", "--grpc-listen", ""])
        .args(["--tls-cert", "/nonexistent/skua-cert.pem", "--tls-key", "/nonexistent/skua-key.pem"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("TLS: cannot read /nonexistent/skua-cert.pem"), "{err}");
}

#[test]
fn print_config_masks_backend_passwords() {
    let (code, out, err) = print_config(
        &[],
        &[
            ("SKUA_BUS", "mqtts://skua:hunter2@broker:8883"),
            ("SKUA_PRESENCE", "rediss://default:hunter2@redis:6380/0"),
            ("SKUA_STORE", "postgres://skua:hunter2@db/skua?sslmode=verify-full"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("hunter2"), "{out}");
    assert!(out.contains("mqtts://…@broker:8883") && out.contains("sslmode=verify-full"), "{out}");
}

#[test]
fn tls_self_signed_needs_dev() {
    let out = skua().args(["serve", "--tls-self-signed", "--print-config"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "clap usage error");
}

#[test]
fn dev_tls_self_signed_serves_https_with_the_pair_it_writes_to_the_data_directory() {
    use std::io::{Read, Write};
    use std::sync::Arc;
    let dir = std::env::temp_dir().join(format!("skua-cli-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = format!("sqlite://{}/skua.db", dir.display());
    let bin = env!("CARGO_BIN_EXE_skua");
    let mut node = skua_testkit::process::SkuaProcess::spawn(
        bin,
        &["--dev", "--tls-self-signed", "--store", &store, "--grpc-listen", ""],
    );
    let cert = dir.join("dev-cert.pem");
    let mut roots = rustls::RootCertStore::empty();
    for c in skua_server::tls::read_certs(&cert).expect("the pair is in the store's directory") {
        roots.add(c).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    let sock = std::net::TcpStream::connect(node.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    // The server may close without close_notify; what was read is enough.
    let _ = tls.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(node.terminate().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_reloads_changed_certificate_files_at_once() {
    use std::io::Write;
    use std::sync::Arc;
    let dir = std::env::temp_dir().join(format!("skua-cli-hup-{}", std::process::id()));
    let next_dir = dir.join("next");
    let _ = std::fs::remove_dir_all(&dir);
    let (files, _) = skua_server::tls::self_signed(&dir).unwrap();
    let (next, _) = skua_server::tls::self_signed(&next_dir).unwrap();
    let (cert, key) = (files.cert.display().to_string(), files.key.display().to_string());
    let args = ["--store", "memory", "--grpc-listen", "", "--tls-cert", &cert, "--tls-key", &key];
    let mut child = skua()
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-reload-interval", "0s", "--metrics-public", "true"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped)
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr: std::net::SocketAddr = loop {
        let line = lines.next().expect("skua exited before listening").unwrap();
        if let Some(a) = line.strip_prefix("skua listening on ") {
            break a.trim().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    // The leaf a client that trusts `ca` is shown, or None when the handshake fails.
    let leaf = |ca: &std::path::Path| {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(skua_server::tls::read_certs(ca).unwrap().remove(0)).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let conn = rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, std::net::TcpStream::connect(addr).unwrap());
        tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").ok()?;
        tls.conn.peer_certificates().map(|c| c[0].clone().into_owned())
    };
    let first = leaf(&files.cert).expect("the first pair");
    std::fs::copy(&next.key, &files.key).unwrap();
    std::fs::copy(&next.cert, &files.cert).unwrap();
    let hup = Command::new("kill").args(["-HUP", &child.id().to_string()]).status().unwrap();
    assert!(hup.success());
    let want = skua_server::tls::read_certs(&next.cert).unwrap().remove(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if leaf(&next.cert).as_ref() == Some(&want) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the new pair was not served after SIGHUP");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_ne!(first, want);
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn admin_tls_ca_needs_an_https_server() {
    let out = skua()
        .args(["admin", "--server", "http://127.0.0.1:1", "--tls-ca", "/nonexistent/ca.pem", "projects", "list"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--tls-ca and --tls-domain need an https:// --server"), "{err}");
}

/// `GET path` on `addr` with `Authorization: Bearer key`: the status code.
async fn rest_status(addr: &str, path: &str, key: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: skua\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut buf)).await.unwrap().unwrap();
    String::from_utf8_lossy(&buf).split(' ').nth(1).and_then(|c| c.parse().ok()).expect("status line")
}

#[tokio::test]
async fn admin_api_keys_create_list_revoke_and_the_dev_key_works() {
    let (child, addr, grpc) = dev_server_with_grpc(&[]).await;
    assert_eq!(rest_status(&addr, "/v1/apps", "skua-dev-api-key").await, 200, "--dev provisions skua-dev-api-key");
    let (code, out, err) = admin(&grpc, &["api-keys", "create", "--name", "ci"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("API key ") && out.contains("(ci, project demo-project)"), "{out}");
    let key = out.lines().last().unwrap().trim().to_owned();
    assert!(key.starts_with("nlg_live_"), "{out}");
    let key_id = key.strip_prefix("nlg_live_").unwrap().split('.').next().unwrap().to_owned();
    assert_eq!(rest_status(&addr, "/v1/actors", &key).await, 200);
    let (code, out, _) = admin(&grpc, &["api-keys", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains(&key_id) && out.contains("ci") && !out.contains(&key), "{out}");
    let (code, out, _) = admin(&grpc, &["--json", "api-keys", "list"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v.as_array().unwrap().iter().any(|k| k["key_id"] == key_id.as_str()), "{out}");
    let (code, out, err) = admin(&grpc, &["api-keys", "revoke", &key_id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "deleted (1 objects)");
    assert_eq!(rest_status(&addr, "/v1/actors", &key).await, 401);
    let (code, _, err) = admin(&grpc, &["api-keys", "revoke", &key_id]);
    assert_eq!((code, err.starts_with("skua admin: NotFound")), (1, true), "{err}");
    stop(child);
}

#[tokio::test]
async fn admin_scopes_create_update_move_an_actor_and_delete() {
    let (child, ws, grpc) = dev_server_with_grpc(&[]).await;
    let (code, out, err) = admin(&grpc, &["scopes", "create", "tenant-a", "--name", "Tenant A"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("scope tenant-a (scope-") && out.ends_with("active, 0 actors)"), "{out}");
    let (code, out, err) = admin(&grpc, &["scopes", "set-actor", "alice", "tenant-a"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(", scope scope-"), "{out}");
    let (_, out, _) = admin(&grpc, &["--json", "scopes", "list"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v[0]["slug"].as_str(), v[0]["actor_count"].as_u64()), (Some("tenant-a"), Some(1)), "{out}");

    let mut alice = WsClient::connect(&format!("ws://{ws}/ws")).await;
    alice.auth_ok("dev-token-alice", 2).await;
    let (code, out, err) = admin(&grpc, &["scopes", "update", "tenant-a", "--active", "false"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("INACTIVE"), "{out}");
    assert_eq!(alice.expect_close().await, (4001, "scope_inactive".to_owned()));
    let (code, out, _) = admin(&grpc, &["scopes", "delete", "tenant-a"]);
    assert_eq!((code, out.as_str()), (0, "deleted (1 objects)"));
    let (_, out, _) = admin(&grpc, &["--json", "actors", "get", "alice"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["scope_id"], "", "alice is unscoped again: {out}");
    stop(child);
}

/// Issue 14: a trigger that failed for good is listed by `skua admin webhooks failures list`,
/// delivered by `… retry --all` with its deliveryId, and `purge` needs ids or `--all`. (Multi
/// thread: the receiver answers while the test thread waits for the admin process.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_lists_and_retries_webhook_failures() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let receiver = WebhookReceiver::start(Mode::Status(500)).await;
    let dir = std::env::temp_dir().join(format!("skua-cli-hooks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixtures = dir.join("hooks.toml");
    let url = receiver.url("/t");
    std::fs::write(
        &fixtures,
        format!(
            "[[projects]]\nid = \"hooks\"\n[[projects.apps]]\nid = \"hooks-app\"\nslug = \"h\"\ntopics = [\"events\"]\n\
             trigger_webhook = {{ url = \"{url}\" }}\n[[projects.apps.rooms]]\nslug = \"r\"\n"
        ),
    )
    .unwrap();
    let fixtures = fixtures.display().to_string();
    let (child, _ws, grpc) = dev_server_with_grpc(&["--fixtures", &fixtures, "--webhook-trigger-attempts", "1"]).await;
    let (code, _, err) = admin(&grpc, &["-p", "hooks", "publish", "h/r/events", "--data", r#"{"n": 1}"#]);
    assert_eq!(code, 0, "{err}");
    let first = receiver.wait_for(1).await;
    let id = first[0].json()["deliveryId"].as_str().unwrap().to_owned();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let listed = loop {
        let (code, out, err) = admin(&grpc, &["-p", "hooks", "--json", "webhooks", "failures", "list"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        if v.as_array().is_some_and(|a| !a.is_empty()) {
            break v;
        }
        assert!(tokio::time::Instant::now() < deadline, "no dead letter within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(listed[0]["delivery_id"], id.as_str());
    assert_eq!(listed[0]["topic"], "h/r/events");
    assert!(listed[0]["last_error"].as_str().unwrap().contains("500"), "{listed}");
    let (code, out, _) = admin(&grpc, &["-p", "hooks", "webhooks", "failures", "list"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("ID") && out.contains(&id), "{out}");

    let (code, _, err) = admin(&grpc, &["-p", "hooks", "webhooks", "failures", "purge"]);
    assert_eq!(code, 1);
    assert!(err.contains("InvalidArgument"), "{err}");

    receiver.set_mode(Mode::Ok(serde_json::json!({})));
    let (code, out, err) = admin(&grpc, &["-p", "hooks", "webhooks", "failures", "retry", "--all"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&id) && out.contains("delivered"), "{out}");
    let got = receiver.wait_for(2).await;
    assert_eq!(got[1].json()["deliveryId"], id.as_str(), "the retry keeps the deliveryId");
    let (_, out, _) = admin(&grpc, &["-p", "hooks", "--json", "webhooks", "failures", "list"]);
    assert_eq!(out, "[]");
    stop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 23, item 6: outside `--dev`, placeholder secrets stop the server with status 64 and a
/// message naming the setting, never the secret; `--dev` keeps its well-known ones.
#[test]
fn placeholder_secrets_are_refused_outside_dev() {
    let (code, _, err) = print_config(&[], &[("SKUA_ADMIN_KEY", "CHANGE-ME-to-a-long-random-key")]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("admin_key") && err.contains("SKUA_ADMIN_KEY") && err.contains("outside --dev"), "{err}");
    assert!(!err.contains("CHANGE-ME-to-a-long"), "the value is not echoed: {err}");
    let (code, _, err) = print_config(&[], &[("SKUA_STORE", "postgres://skua:CHANGE-ME@db:5432/skua")]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("SKUA_STORE"), "{err}");
    let (code, _, err) = print_config(&["--metrics-token", "changeme-changeme-changeme"], &[]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("metrics_token"), "{err}");
    let (code, _, err) = print_config(&["--dev"], &[("SKUA_ADMIN_KEY", "skua-dev-admin-key")]);
    assert_eq!(code, 0, "--dev runs on its well-known key: {err}");
    let (code, _, err) = print_config(&[], &[("SKUA_ADMIN_KEY", "3f1c9e0b7a5d42e8b6c1f0a9d8e7c6b5")]);
    assert_eq!(code, 0, "{err}");
}

/// Issue 23, item 6: a node told it is part of a cluster refuses to start on in-process
/// backends instead of running alone; the default (one node, in-process) is unchanged.
#[test]
fn a_cluster_node_without_shared_backends_refuses_to_start() {
    let (code, _, err) = print_config(&[], &[("SKUA_CLUSTER", "true"), ("SKUA_STORE", "postgres://skua@db/skua")]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("cluster") && err.contains("SKUA_BUS") && err.contains("SKUA_PRESENCE"), "{err}");
    let (code, out, err) = print_config(
        &["--cluster", "true"],
        &[
            ("SKUA_BUS", "mqtt://broker:1883"),
            ("SKUA_PRESENCE", "redis://redis:6379/0"),
            ("SKUA_STORE", "postgres://skua@db/skua"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cluster: true"), "{out}");
    let (code, _, err) = print_config(&[], &[]);
    assert_eq!(code, 0, "a single node on in-process backends by default: {err}");
}

/// Issue 23, item 5: `skua migrate` of an older release against a database a newer release
/// migrated succeeds and says so.
#[test]
fn migrate_after_a_rollback_succeeds_and_names_the_newer_migrations() {
    let dir = std::env::temp_dir().join(format!("skua-rollback-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let url = format!("sqlite://{}/skua.db", dir.display());
    let out = skua().args(["migrate", "--store", &url]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A newer release's migration, as sqlx records it.
    let db = dir.join("skua.db");
    let insert = "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                  VALUES (29991231000001, 'from a newer release', 1, X'00', 0)";
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        use sqlx::Connection as _;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.unwrap();
        sqlx::query(insert).execute(&mut c).await.unwrap();
        let _ = c.close().await;
    });
    let out = skua().args(["migrate", "--store", &url]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("29991231000001") && stdout.contains("newer release"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 33, item 12: outside `--dev`, a `/metrics` without a token is refused at start unless
/// `metrics_public` says so; the auth deadline is on by default, off under `--dev`.
#[test]
fn serve_refuses_a_public_metrics_outside_dev_and_the_auth_deadline_is_on_by_default() {
    let out =
        skua().args(["serve", "--listen", "127.0.0.1:0", "--store", "memory", "--grpc-listen", ""]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("metrics_token") && err.contains("metrics_public = true"), "{err}");
    // Asked explicitly, or with a token: it starts.
    let node = skua_testkit::process::SkuaProcess::spawn(
        env!("CARGO_BIN_EXE_skua"),
        &["--store", "memory", "--grpc-listen", "", "--metrics-public", "true"],
    );
    drop(node);
    let node = skua_testkit::process::SkuaProcess::spawn(
        env!("CARGO_BIN_EXE_skua"),
        &["--store", "memory", "--grpc-listen", "", "--metrics-token", "a-metrics-token-of-some-length"],
    );
    drop(node);
    let (code, out, err) = print_config(&[], &[]);
    assert_eq!(code, 0, "{err}");
    let at = out.find("auth_timeout: ").expect("auth_timeout printed");
    let shown: String = out[at..].chars().take(40).collect();
    assert!(shown.starts_with("auth_timeout: Some(") && shown.contains("10s"), "on by default: {shown}");
    let (code, out, err) = print_config(&["--dev"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("auth_timeout: None"), "--dev keeps hand-typed clients convenient: {out}");
}

/// `skua admin --json --project demo-project ARGS`, parsed; fails the test on a non-zero exit.
fn admin_json(grpc: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "--project", "demo-project"];
    all.extend_from_slice(args);
    let (code, out, err) = admin(grpc, &all);
    assert_eq!(code, 0, "skua admin {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("skua admin {args:?} printed no JSON ({e}): {out}"))
}

/// Issue 35: the admin verbs that no other test ran (projects update/delete, apps list/delete/
/// set-topic-history/set-topic-webhooks, rooms get/update, actors list/activate/rotate/disconnect,
/// grants list/delete, lobbies create/list/set-rooms/delete), each checked for its effect.
#[tokio::test]
async fn the_admin_verbs_no_other_test_runs_each_do_what_they_say() {
    let (child, ws, grpc) = dev_server_with_grpc(&[]).await;
    let g = grpc.as_str();
    // Projects.
    admin_json(g, &["projects", "create", "p2", "--name", "P2"]);
    let p = admin_json(g, &["projects", "update", "p2", "--name", "P2b", "--max-connections", "5"]);
    assert_eq!((p["name"].as_str(), p["limits"]["max_connections"].as_u64()), (Some("P2b"), Some(5)), "{p}");
    assert_eq!(admin_json(g, &["projects", "delete", "p2"])["deleted"], 1);
    let (code, _, err) = admin(g, &["projects", "get", "p2"]);
    assert_eq!(code, 1, "deleted: {err}");
    // Apps.
    admin_json(g, &["apps", "create", "a2"]);
    let slugs = |v: &serde_json::Value| -> Vec<String> {
        let mut s: Vec<String> = v.as_array().unwrap().iter().map(|a| a["slug"].as_str().unwrap().to_owned()).collect();
        s.sort();
        s
    };
    assert_eq!(slugs(&admin_json(g, &["apps", "list"])), ["a2", "demo"]);
    let topic = |app: &serde_json::Value, name: &str| -> serde_json::Value {
        app["topics"].as_array().unwrap().iter().find(|t| t["name"] == name).cloned().unwrap_or_default()
    };
    let app = admin_json(g, &["apps", "set-topic-history", "demo", "messages", "--size", "10", "--ttl", "1m"]);
    assert_eq!(topic(&app, "messages")["history"], serde_json::json!({"size": 10, "ttl_ms": 60000}), "{app}");
    let app = admin_json(g, &["apps", "set-topic-history", "demo", "messages", "--off"]);
    assert!(topic(&app, "messages")["history"].is_null(), "{app}");
    let app =
        admin_json(g, &["apps", "set-topic-webhooks", "demo", "messages", "--on-publish", "http://127.0.0.1:9/x"]);
    assert_eq!(topic(&app, "messages")["webhooks"]["on_publish"]["url"], "http://127.0.0.1:9/x", "{app}");
    assert_eq!(admin_json(g, &["apps", "delete", "a2"])["deleted"], 1);
    assert_eq!(slugs(&admin_json(g, &["apps", "list"])), ["demo"]);
    // Rooms.
    assert_eq!(admin_json(g, &["rooms", "update", "demo", "general", "--name", "Gen"])["name"], "Gen");
    assert_eq!(admin_json(g, &["rooms", "get", "demo", "general"])["name"], "Gen");
    // Actors.
    let page = admin_json(g, &["actors", "list", "--page-size", "2"]);
    assert_eq!(page["actors"].as_array().unwrap().len(), 2, "{page}");
    assert!(!page["next_page_token"].as_str().unwrap_or_default().is_empty(), "{page}");
    let mut alice = WsClient::connect(&format!("ws://{ws}/ws")).await;
    alice.auth_ok("dev-token-alice", 2).await;
    assert_eq!(admin_json(g, &["actors", "disconnect", "alice"])["closed_on_this_node"], 1);
    assert_eq!(alice.expect_close().await.0, 4001, "disconnected by the admin");
    admin_json(g, &["actors", "deactivate", "alice"]);
    assert_eq!(admin_json(g, &["actors", "activate", "alice"])["active"], true);
    let mut again = WsClient::connect(&format!("ws://{ws}/ws")).await;
    again.auth_ok("dev-token-alice", 2).await;
    let rotated = admin_json(g, &["actors", "rotate", "bob"]);
    let token = rotated["access_token"].as_str().expect("a new token").to_owned();
    let mut old = WsClient::connect(&format!("ws://{ws}/ws")).await;
    assert_eq!(old.auth("dev-token-bob", Some(2)).await.str("error"), "access_denied", "the old token is replaced");
    let mut new = WsClient::connect(&format!("ws://{ws}/ws")).await;
    assert_eq!(new.auth_ok(&token, 2).await.str("actorTokenId"), "bob");
    // Grants.
    let grant = admin_json(g, &["grants", "create", "demo", "random", "--actor", "alice", "--permission", "pubSub"]);
    let id = grant["id"].as_str().unwrap().to_owned();
    assert_eq!(admin_json(g, &["grants", "list", "demo", "random"]).as_array().unwrap().len(), 1);
    admin_json(g, &["grants", "delete", &id]);
    assert_eq!(admin_json(g, &["grants", "list", "demo", "random"]), serde_json::json!([]));
    // Lobbies.
    let lobby = admin_json(g, &["lobbies", "create", "lob2", "--app", "demo", "--room", "general"]);
    assert_eq!(lobby["rooms"], serde_json::json!(["general"]));
    let lobby = admin_json(g, &["lobbies", "set-rooms", "lob2", "--room", "general", "--room", "random"]);
    assert_eq!(lobby["rooms"], serde_json::json!(["general", "random"]));
    assert_eq!(admin_json(g, &["lobbies", "list"]).as_array().unwrap().len(), 2, "lob2 and the fixtures' online");
    assert_eq!(admin_json(g, &["lobbies", "delete", "lob2"])["deleted"], 1);
    assert_eq!(admin_json(g, &["lobbies", "list"]).as_array().unwrap().len(), 1);
    // Output into a pipe nobody reads any more (`skua admin … | head`): no panic, exit 0.
    let mut piped = skua()
        .args(["admin", "--server", &format!("http://{g}"), "--admin-key", "skua-dev-admin-key", "actors", "list"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(Reaped)
        .unwrap();
    drop(piped.stdout.take());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut piped.stderr.take().unwrap(), &mut err).unwrap();
    assert!(piped.wait().unwrap().success() && !err.contains("panicked"), "{err}");
    stop(child);
}

/// Issue 35: `SKUA_LOG_FORMAT=json` (README, docs/operations.md) makes every log line one JSON
/// object with the level and the message, from the first line to the drain's last.
#[tokio::test]
async fn skua_log_format_json_writes_every_log_line_as_one_json_object() {
    let mut child = skua()
        .args(["serve", "--dev", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--store", "memory"])
        .env("SKUA_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(Reaped)
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.starts_with("skua listening on "), "{first:?}");
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let stderr = child.stderr.take().unwrap();
    stop(child);
    let lines: Vec<String> = BufReader::new(stderr).lines().map(Result::unwrap).collect();
    assert!(lines.len() >= 2, "a start and a drain at least: {lines:?}");
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"]["message"].is_string(), "{line}");
    }
}
