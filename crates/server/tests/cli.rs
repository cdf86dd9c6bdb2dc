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
        .args(["serve", "--dev", "--listen", "127.0.0.1:0", "--shutdown-grace", "5s", "--store", "memory"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
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
