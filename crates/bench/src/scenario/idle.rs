//! `idle`: C logged-in connections, each subscribed to the fan-out topic, then the server's
//! RSS growth per connection. Setup rate and server CPU per setup come for free.

use std::time::{Duration, Instant};

use super::{Ctx, client_cpu, connect_all, cpu_pct, used};
use crate::conn::ConnOptions;
use crate::procfs;
use crate::summary::Summary;
use crate::wire::{Role, TopicKey};

/// Runs `idle` with `connections` connections; `settle` is the pause before reading RSS.
///
/// # Errors
/// None today; failed connections are counted, not fatal.
pub async fn run(ctx: &Ctx, connections: usize, settle: Duration) -> anyhow::Result<Summary> {
    let topic = ctx.wire.topic(TopicKey::Fanout);
    let rss = |pid: Option<u32>| pid.and_then(|p| procfs::rss_kib(p).ok());
    let rss0 = rss(ctx.server_pid);
    let (srv0, cli0, t0) = (ctx.server_cpu(), client_cpu(), Instant::now());
    // Small read buffers: these sockets carry one heartbeat each.
    let opts = ConnOptions { read_buffer: 4096, ..ConnOptions::default() };
    let (mut conns, failed) = connect_all(ctx, connections, Role::Subscriber, |_| Some(topic.clone()), opts).await;
    let setup_secs = t0.elapsed().as_secs_f64();
    let (srv1, cli1) = (ctx.server_cpu(), client_cpu());
    tokio::time::sleep(settle).await;
    let rss1 = rss(ctx.server_pid);

    // Every connection must still be served: one heartbeat each, and an answer to each.
    let (mut alive, hb) = (0usize, ctx.wire.heartbeat());
    for c in &mut conns {
        let _ = c.ws.send(&hb).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for c in &mut conns {
        if let Ok(Ok(n)) = tokio::time::timeout_at(deadline, c.ws.fill()).await
            && n > 0
        {
            alive += 1;
        }
    }

    let ok = conns.len();
    let mut s = ctx.summary("idle", format!("idle C={connections}"));
    s.set("connections", connections);
    s.set("connected", ok);
    s.set("conn_errors", failed.len());
    s.set("alive_after", alive);
    s.set("setup_s", setup_secs);
    s.set("setups_per_s", ok as f64 / setup_secs);
    let srv_used = used(srv0, srv1);
    s.set("server_cpu_us_per_setup", srv_used.filter(|_| ok > 0).map(|u| u as f64 / ok as f64));
    s.set("server_cpu_pct", cpu_pct(srv_used, setup_secs));
    s.set("client_cpu_pct", cpu_pct(used(cli0, cli1), setup_secs));
    s.set("rss_before_kib", rss0);
    s.set("rss_after_kib", rss1);
    let per = match (rss0, rss1) {
        (Some(a), Some(b)) if ok > 0 => Some(b.saturating_sub(a) as f64 / ok as f64),
        _ => None,
    };
    s.set("kib_per_conn", per);
    s.set("ok", failed.is_empty() && alive == ok);
    if let Some(e) = failed.first() {
        s.notes.push(format!("{} connections failed, e.g. {e:#}", failed.len()));
    }
    if ctx.server_pid.is_none() {
        s.notes.push("no --server-pid: RSS and CPU are not measured".into());
    }
    drop(conns);
    Ok(s)
}
