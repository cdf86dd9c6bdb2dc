//! TLS on the listeners (docs/security.md): a `wss://` client that trusts the node's
//! certificate authenticates; new certificate files are served to new handshakes without a
//! restart, a bad new pair keeps the old one; the control plane over TLS, from tonic and from
//! `skua admin --tls-ca`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::{CertificateDer, ServerName};
use skua_control::pb;
use skua_server::tls::{self, CertFiles};
use skua_server::{RunningNode, ServerConfig, Settings, fixtures, node};
use skua_testkit::client::encode;
use skua_testkit::{TEST_ADMIN_KEY, frame};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(10);

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("skua-it-tls-{name}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A node with the dev fixtures whose listeners use `files`, checked for changes every 50 ms.
async fn tls_node(files: &CertFiles, grpc: bool) -> RunningNode {
    let settings = {
        let mut layer = Settings::default();
        layer.node.listen = Some("127.0.0.1:0".into());
        layer.node.store = Some("memory".into());
        layer.node.tls_cert = Some(files.cert.display().to_string());
        layer.node.tls_key = Some(files.key.display().to_string());
        layer.node.tls_reload_interval = Some("50ms".into());
        layer.node.admin_key = Some(TEST_ADMIN_KEY.into());
        layer
    };
    let config = ServerConfig::from_layers(&[&settings]).unwrap();
    let data = fixtures::load_data(&[("dev", fixtures::DEV_FIXTURES)]).unwrap();
    let embedded = node::Embedded::default();
    let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
    let grpc = if grpc { Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()) } else { None };
    let backends = node::backends(&config, &embedded).await.unwrap();
    let registry_store = node::registry_store(&config, &embedded).await.unwrap();
    RunningNode::launch(&config, backends, registry_store, Some(&data), listener, grpc).await.unwrap()
}

/// A client trusting only the certificates in `ca`.
fn connector(ca: &Path) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in tls::read_certs(ca).unwrap() {
        roots.add(c).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// Handshakes with `addr` as `localhost`, trusting `ca`; returns the stream and the leaf the
/// node presented.
async fn handshake(addr: SocketAddr, ca: &Path) -> std::io::Result<(TlsStream<TcpStream>, CertificateDer<'static>)> {
    let tcp = TcpStream::connect(addr).await?;
    let tls = connector(ca).connect(ServerName::try_from("localhost").unwrap(), tcp).await?;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone().into_owned();
    Ok((tls, leaf))
}

fn leaf_of(files: &CertFiles) -> CertificateDer<'static> {
    tls::read_certs(&files.cert).unwrap().remove(0)
}

/// Writes `from`'s pair over `to`'s files (key first, as a certificate manager would).
fn replace_pair(from: &CertFiles, to: &CertFiles) {
    std::fs::copy(&from.key, &to.key).unwrap();
    std::fs::copy(&from.cert, &to.cert).unwrap();
}

#[tokio::test]
async fn a_wss_client_trusting_the_certificate_authenticates_with_a_demo_token() {
    let dir = temp_dir("wss");
    let (files, _) = tls::self_signed(&dir).unwrap();
    let node = tls_node(&files, false).await;
    let (stream, leaf) = handshake(node.addr, &files.cert).await.unwrap();
    assert_eq!(leaf, leaf_of(&files));
    let url = format!("wss://localhost:{}/ws", node.addr.port());
    let (mut ws, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    let auth = frame! {"type" => "auth", "token" => "dev-token-alice", "protocolVersion" => 2};
    ws.send(Message::Binary(encode(&auth).into())).await.unwrap();
    let reply = loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("an auth reply").unwrap().unwrap() {
            Message::Binary(b) => break rmpv::decode::read_value(&mut &b[..]).unwrap(),
            _ => continue,
        }
    };
    let reply = skua_testkit::client::Frame(reply);
    assert_eq!(reply.ty(), "auth");
    assert_eq!(reply.get("success"), &rmpv::Value::Boolean(true), "{reply:?}");
    let _ = node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_plain_client_gets_no_websocket_from_a_tls_listener() {
    let dir = temp_dir("plain");
    let (files, _) = tls::self_signed(&dir).unwrap();
    let node = tls_node(&files, false).await;
    let plain = tokio_tungstenite::connect_async(format!("ws://{}/ws", node.addr)).await;
    assert!(plain.is_err(), "a plain-text upgrade must fail on a TLS listener");
    let _ = node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn new_certificate_files_reach_new_handshakes_without_a_restart() {
    let dir = temp_dir("reload");
    let (files, _) = tls::self_signed(&dir).unwrap();
    let node = tls_node(&files, false).await;
    let first = leaf_of(&files);
    assert_eq!(handshake(node.addr, &files.cert).await.unwrap().1, first);
    let mut status = node.tls.client.as_ref().unwrap().certs.status();

    let other = temp_dir("reload-next");
    let (next, _) = tls::self_signed(&other).unwrap();
    let next_leaf = leaf_of(&next);
    assert_ne!(next_leaf, first);
    replace_pair(&next, &files);
    tokio::time::timeout(WAIT, status.wait_for(|s| s.reloads >= 1)).await.expect("a reload").unwrap();

    let (_, seen) = handshake(node.addr, &next.cert).await.unwrap();
    assert_eq!(seen, next_leaf, "a new handshake sees the new certificate");
    let _ = node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(other);
}

#[tokio::test]
async fn a_bad_new_certificate_keeps_the_old_pair_in_service() {
    let dir = temp_dir("bad");
    let (files, _) = tls::self_signed(&dir).unwrap();
    let trusted = dir.join("trusted.pem");
    std::fs::copy(&files.cert, &trusted).unwrap();
    let node = tls_node(&files, false).await;
    let mut status = node.tls.client.as_ref().unwrap().certs.status();

    std::fs::write(&files.cert, "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n").unwrap();
    tokio::time::timeout(WAIT, status.wait_for(|s| s.failures >= 1)).await.expect("a refused reload").unwrap();
    // A watcher tick during the write may see it half done: one failure or two, no reload.
    assert_eq!(status.borrow().reloads, 0);

    let (_, seen) = handshake(node.addr, &trusted).await.unwrap();
    assert_eq!(seen, leaf_of(&CertFiles { cert: trusted.clone(), key: files.key.clone() }));
    let _ = node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_control_plane_serves_grpc_over_tls_to_tonic_and_to_skua_admin() {
    let dir = temp_dir("grpc");
    let (files, _) = tls::self_signed(&dir).unwrap();
    let node = tls_node(&files, true).await;
    let grpc = node.grpc_addr.unwrap();

    let ca = tonic::transport::Certificate::from_pem(std::fs::read(&files.cert).unwrap());
    let channel = tonic::transport::Channel::from_shared(format!("https://localhost:{}", grpc.port()))
        .unwrap()
        .tls_config(tonic::transport::ClientTlsConfig::new().ca_certificate(ca))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let key: tonic::metadata::MetadataValue<_> = format!("Bearer {TEST_ADMIN_KEY}").parse().unwrap();
    let mut client = pb::control_client::ControlClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
        r.metadata_mut().insert("authorization", key.clone());
        Ok(r)
    });
    let projects = client.list_projects(pb::ListProjectsRequest {}).await.unwrap().into_inner().projects;
    assert_eq!(projects.len(), 1);

    // Plain-text gRPC to the TLS listener fails.
    let plain = tonic::transport::Channel::from_shared(format!("http://{grpc}")).unwrap().connect().await;
    if let Ok(channel) = plain {
        let mut c = pb::control_client::ControlClient::new(channel);
        assert!(c.list_projects(pb::ListProjectsRequest {}).await.is_err());
    }

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_skua"))
        .args(["admin", "--server", &format!("https://127.0.0.1:{}", grpc.port()), "--tls-ca"])
        .arg(&files.cert)
        .args(["--admin-key", TEST_ADMIN_KEY, "--json", "projects", "list"])
        .env_remove("SKUA_ADMIN_SERVER")
        .env_remove("SKUA_ADMIN_KEY")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("demo-project"), "{stdout}");

    // Without the CA the CLI refuses the self-signed certificate.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_skua"))
        .args(["admin", "--server", &format!("https://127.0.0.1:{}", grpc.port())])
        .args(["--admin-key", TEST_ADMIN_KEY, "projects", "list"])
        .env_remove("SKUA_ADMIN_TLS_CA")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let _ = node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_dashboards_session_cookie_is_secure_over_tls() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = temp_dir("dashboard");
    let (files, _) = tls::self_signed(&dir).unwrap();
    let node = tls_node(&files, false).await;
    let (mut stream, _) = handshake(node.addr, &files.cert).await.unwrap();
    let body = format!("admin_key={TEST_ADMIN_KEY}");
    let req = format!(
        "POST /admin/login HTTP/1.1\r\nHost: localhost:{}\r\nOrigin: https://localhost:{}\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        node.addr.port(),
        node.addr.port(),
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut reply)).await.expect("a reply");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 303"), "{reply}");
    let cookie = reply.lines().find(|l| l.to_ascii_lowercase().starts_with("set-cookie:")).expect("a session cookie");
    assert!(cookie.ends_with("; Path=/admin; HttpOnly; SameSite=Strict; Secure"), "{cookie}");
    // With TLS the dashboard asks browsers to keep to HTTPS (issue 33, item 11).
    let hsts = reply.lines().find(|l| l.to_ascii_lowercase().starts_with("strict-transport-security:"));
    assert_eq!(hsts.map(str::to_ascii_lowercase).as_deref(), Some("strict-transport-security: max-age=31536000"));
    let _ = node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
