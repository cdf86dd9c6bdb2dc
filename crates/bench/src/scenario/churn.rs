//! `churn`: connect → login → subscribe → close, started at a target rate with a cap on how
//! many are in flight. Reports the achieved rate of completed cycles inside the window, the
//! setup latency (connect to subscription acknowledged) and the errors.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::{Instant, MissedTickBehavior, interval_at, sleep_until};

use super::{Ctx, client_cpu, cpu_pct, machine_cpu, set_machine, used};
use crate::conn::{self, ConnOptions};
use crate::summary::Summary;
use crate::track::{MAX_LATENCY_US, Window, histogram};
use crate::wire::{TopicKey, Wire};

/// How a churn run goes.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Cycles started per second.
    pub rate: f64,
    /// Most cycles in flight; when reached, starting waits (and the achieved rate shows it).
    pub concurrency: usize,
    /// Connect from this many loopback addresses (127.0.0.1, .2, …) to spread ephemeral ports.
    pub source_ips: u8,
}

#[derive(Default)]
struct Tally {
    done_in_window: u64,
    done: u64,
    errors: u64,
    first_error: Option<String>,
}

/// Runs `churn`. Cycle `k` logs in with `logins[k % logins.len()]` (one adapter per actor),
/// or with `ctx.wire` when `logins` is empty.
///
/// # Errors
/// None today; failed cycles are counted.
pub async fn run(ctx: &Ctx, plan: Plan, logins: &[Arc<dyn Wire>]) -> anyhow::Result<Summary> {
    let topic = Arc::new(ctx.wire.topic(TopicKey::Fanout));
    let t0 = Instant::now() + Duration::from_millis(100);
    let window = Window { start: (t0 + ctx.warmup).into_std(), end: (t0 + ctx.warmup + ctx.duration).into_std() };
    let tally = Arc::new(Mutex::new(Tally::default()));
    let lat = Arc::new(Mutex::new(histogram()));
    let sem = Arc::new(Semaphore::new(plan.concurrency));
    let spread = ctx.target.addr.ip() == IpAddr::V4(Ipv4Addr::LOCALHOST) && plan.source_ips > 1;

    let sampler = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            sleep_until(window.start.into()).await;
            let a = (ctx.server_cpu(), client_cpu(), machine_cpu());
            ctx.mark_window("start").await;
            sleep_until(window.end.into()).await;
            ctx.mark_window("end").await;
            (a, (ctx.server_cpu(), client_cpu(), machine_cpu()))
        })
    };

    let mut tick = interval_at(t0, Duration::from_secs_f64(1.0 / plan.rate));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut started = 0u64;
    loop {
        tick.tick().await;
        if std::time::Instant::now() >= window.end {
            break;
        }
        let Ok(permit) = sem.clone().acquire_owned().await else { break };
        let source =
            spread.then(|| IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + (started % u64::from(plan.source_ips)) as u8)));
        let wire = match logins.len() {
            0 => ctx.wire.clone(),
            n => logins[(started % n as u64) as usize].clone(),
        };
        started += 1;
        let (ctx, topic, tally, lat) = (ctx.clone(), topic.clone(), tally.clone(), lat.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let begin = std::time::Instant::now();
            let opts = ConnOptions { read_buffer: 4096, source };
            let r = conn::subscriber(&ctx.target, wire.as_ref(), &topic, opts).await;
            let end = std::time::Instant::now();
            match r {
                Ok(c) => {
                    c.ws.close().await;
                    let mut t = tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    t.done += 1;
                    if window.contains(end) {
                        t.done_in_window += 1;
                        let us = u64::try_from((end - begin).as_micros()).unwrap_or(u64::MAX);
                        let _ = lat
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .record(us.clamp(1, MAX_LATENCY_US));
                    }
                }
                Err(e) => {
                    let mut t = tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    t.errors += 1;
                    t.first_error.get_or_insert_with(|| format!("{e:#}"));
                }
            }
        });
    }
    // Wait (bounded) for the cycles still in flight.
    let max = u32::try_from(plan.concurrency).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(ctx.drain.max(Duration::from_secs(3)), sem.acquire_many(max)).await;
    let ((srv0, cli0, m0), (srv1, cli1, m1)) = sampler.await?;

    let secs = window.secs();
    let t = tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let lat = lat.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let actors = logins.len().max(1);
    let case = if actors > 1 {
        format!("churn target={}/s actors={actors}", plan.rate)
    } else {
        format!("churn target={}/s", plan.rate)
    };
    let mut s = ctx.summary("churn", case);
    s.set("rate_target", plan.rate);
    s.set("actors", actors);
    s.set("concurrency", plan.concurrency);
    s.set("warmup_s", ctx.warmup.as_secs_f64());
    s.set("duration_s", secs);
    s.set("started", started);
    s.set("completed", t.done);
    s.set("churn_per_s", t.done_in_window as f64 / secs);
    s.set("conn_errors", t.errors);
    s.latency("setup", &lat);
    let srv_used = used(srv0, srv1);
    s.set("server_cpu_us", srv_used);
    s.set("server_cpu_pct", cpu_pct(srv_used, secs));
    s.set(
        "server_cpu_us_per_cycle",
        srv_used.filter(|_| t.done_in_window > 0).map(|u| u as f64 / t.done_in_window as f64),
    );
    s.set("client_cpu_pct", cpu_pct(used(cli0, cli1), secs));
    set_machine(&mut s, m0, m1, secs);
    s.set("ok", t.errors == 0);
    if let Some(e) = &t.first_error {
        s.notes.push(format!("{} cycles failed, e.g. {e}", t.errors));
    }
    Ok(s)
}
