//! `rest`: server-side publishes over Skua's REST API (`POST /v1/publish`, docs/rest-api.md)
//! from C keep-alive HTTP/1.1 clients, each sending its next request as soon as the previous
//! answer arrived (closed loop). Reports the publishes answered 200 per second inside the
//! window, the other answers and failed requests, the request latency and the server CPU per
//! publish.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::time::{Instant, sleep_until};

use super::{Ctx, client_cpu, cpu_pct, machine_cpu, set_machine, used};
use crate::summary::Summary;
use crate::track::{MAX_LATENCY_US, Window, histogram};

/// How a REST run goes.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Concurrent keep-alive clients (C).
    pub clients: usize,
    /// `app/room/topic` published to.
    pub topic: String,
    /// Bytes of the JSON string sent as `data`.
    pub payload: usize,
    /// The project API key (`Authorization: Bearer …`).
    pub api_key: String,
}

#[derive(Default)]
struct Tally {
    ok_in_window: u64,
    ok: u64,
    /// Answers other than 200 (each status once, with the first body).
    refused: u64,
    /// Requests that got no answer (connection failed or closed).
    failed: u64,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, e: String) {
        self.first_error.get_or_insert(e);
    }
}

/// One keep-alive connection to the server's HTTP listener.
async fn connect(addr: std::net::SocketAddr) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.with_context(|| format!("while connecting to {addr}"))?;
    tcp.set_nodelay(true)?;
    let (send, conn) = http1::handshake(TokioIo::new(tcp)).await.context("HTTP/1.1 handshake")?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// Runs `rest` against the HTTP listener of `ctx.target` (the address of its `/ws`).
///
/// # Errors
/// None today; failed requests are counted.
pub async fn run(ctx: &Ctx, plan: &Plan) -> anyhow::Result<Summary> {
    let body = Bytes::from(crate::json::line(&[
        ("topic".into(), plan.topic.as_str().into()),
        ("data".into(), "x".repeat(plan.payload).into()),
    ]));
    let t0 = Instant::now() + Duration::from_millis(100);
    let window = Window { start: (t0 + ctx.warmup).into_std(), end: (t0 + ctx.warmup + ctx.duration).into_std() };
    let tally = Arc::new(Mutex::new(Tally::default()));
    let lat = Arc::new(Mutex::new(histogram()));
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
    let addr = ctx.target.addr;
    let host = addr.to_string();
    let auth = format!("Bearer {}", plan.api_key);
    let mut clients = Vec::with_capacity(plan.clients);
    for _ in 0..plan.clients {
        let (tally, lat, body, host, auth) = (tally.clone(), lat.clone(), body.clone(), host.clone(), auth.clone());
        clients.push(tokio::spawn(async move {
            sleep_until(t0).await;
            let mut conn = None;
            while std::time::Instant::now() < window.end {
                let send = match &mut conn {
                    Some(s) => s,
                    None => match connect(addr).await {
                        Ok(s) => conn.insert(s),
                        Err(e) => {
                            {
                                let mut t = tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                                t.failed += 1;
                                t.error(format!("{e:#}"));
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                let req = hyper::Request::post("/v1/publish")
                    .header(hyper::header::HOST, host.as_str())
                    .header(hyper::header::AUTHORIZATION, auth.as_str())
                    .header(hyper::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(body.clone()));
                let Ok(req) = req else { break };
                let begin = std::time::Instant::now();
                let answer = match send.ready().await {
                    Ok(()) => send.send_request(req).await.map_err(anyhow::Error::from),
                    Err(e) => Err(e.into()),
                };
                let answer = match answer {
                    Ok(r) => {
                        let status = r.status();
                        r.into_body().collect().await.map(|b| (status, b.to_bytes())).map_err(anyhow::Error::from)
                    }
                    Err(e) => Err(e),
                };
                let end = std::time::Instant::now();
                let mut t = tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match answer {
                    Ok((status, _)) if status == hyper::StatusCode::OK => {
                        t.ok += 1;
                        if window.contains(end) {
                            t.ok_in_window += 1;
                            let us = u64::try_from((end - begin).as_micros()).unwrap_or(u64::MAX);
                            let _ = lat
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .record(us.clamp(1, MAX_LATENCY_US));
                        }
                    }
                    Ok((status, b)) => {
                        t.refused += 1;
                        t.error(format!("{status}: {}", String::from_utf8_lossy(&b)));
                    }
                    Err(e) => {
                        t.failed += 1;
                        t.error(format!("{e:#}"));
                        conn = None;
                    }
                }
            }
        }));
    }
    for c in clients {
        let _ = c.await;
    }
    let ((srv0, cli0, m0), (srv1, cli1, m1)) = sampler.await?;

    let secs = window.secs();
    let t = tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let lat = lat.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut s = ctx.summary("rest", format!("rest C={} P={}", plan.clients, plan.payload));
    s.set("clients", plan.clients);
    s.set("topic", plan.topic.as_str());
    s.set("payload", plan.payload);
    s.set("warmup_s", ctx.warmup.as_secs_f64());
    s.set("duration_s", secs);
    s.set("published", t.ok);
    s.set("publishes_per_s", t.ok_in_window as f64 / secs);
    s.set("refused", t.refused);
    s.set("failed", t.failed);
    s.latency("req", &lat);
    let srv_used = used(srv0, srv1);
    s.set("server_cpu_us", srv_used);
    s.set("server_cpu_pct", cpu_pct(srv_used, secs));
    s.set(
        "server_cpu_us_per_publish",
        srv_used.filter(|_| t.ok_in_window > 0).map(|u| u as f64 / t.ok_in_window as f64),
    );
    s.set("client_cpu_pct", cpu_pct(used(cli0, cli1), secs));
    set_machine(&mut s, m0, m1, secs);
    s.set("ok", t.refused == 0 && t.failed == 0 && t.ok_in_window > 0);
    if let Some(e) = &t.first_error {
        s.notes.push(format!("{} refused, {} failed, e.g. {e}", t.refused, t.failed));
    }
    Ok(s)
}
