//! Skua's store operation counts, read from its Prometheus endpoint (`/metrics` on the client
//! listener, Skua's default): how many store operations of each kind a run cost, by the
//! `_count` of `skua_backend_operation_duration_seconds{slot="store"}`. Counts, unlike CPU time,
//! do not depend on what else the machine is doing.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::summary::Summary;
use crate::target::Target;

/// The series whose `_count` counts store operations.
const SERIES: &str = "skua_backend_operation_duration_seconds_count{";
/// The series whose `_sum` adds up their seconds.
const SUM_SERIES: &str = "skua_backend_operation_duration_seconds_sum{";

/// Most bytes of `/metrics` read.
const MAX_BYTES: usize = 8 * 1024 * 1024;

/// Store operations so far, by operation name (`claim`, `ack`, `append`…): how many, and
/// their seconds in all; `None` when the target serves no such metrics (not Skua, a separate
/// metrics listener, a metrics token).
pub async fn store_ops(target: &Target) -> Option<BTreeMap<String, (u64, f64)>> {
    let text = tokio::time::timeout(Duration::from_secs(5), get_metrics(target)).await.ok()??;
    let counts = parse(&text, SERIES);
    let sums = parse(&text, SUM_SERIES);
    Some(counts.into_iter().map(|(op, n)| (op.clone(), (n as u64, sums.get(&op).copied().unwrap_or(0.0)))).collect())
}

async fn get_metrics(target: &Target) -> Option<String> {
    let mut s = TcpStream::connect(target.addr).await.ok()?;
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", target.addr);
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() + n > MAX_BYTES {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    text.starts_with("HTTP/1.1 200").then_some(text)
}

/// The store operations' values of `series` in a Prometheus exposition (chunked transfer
/// framing, if any, is harmless: only whole sample lines match).
fn parse(text: &str, series: &str) -> BTreeMap<String, f64> {
    let mut ops = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(series) else { continue };
        let Some((labels, value)) = rest.split_once("} ") else { continue };
        if !labels.split(',').any(|l| l == "slot=\"store\"") {
            continue;
        }
        let op = labels.split(',').find_map(|l| l.strip_prefix("op=\"")?.strip_suffix('"'));
        if let (Some(op), Ok(n)) = (op, value.trim().parse::<f64>()) {
            ops.insert(op.to_owned(), n);
        }
    }
    ops
}

/// Sets `store_ops` (store operations in the window), `store_ops_per_delivery` and, per
/// operation, `store_<op>_per_delivery` and `store_<op>_mean_us` from the counts at the
/// window's edges and the deliveries received in it.
pub fn set_store_ops(
    s: &mut Summary,
    before: Option<&BTreeMap<String, (u64, f64)>>,
    after: Option<&BTreeMap<String, (u64, f64)>>,
    delivered: u64,
) {
    let (Some(before), Some(after)) = (before, after) else {
        s.set("store_ops", None::<u64>);
        s.notes.push("no store operation counts: the target serves no Skua /metrics on its address".into());
        return;
    };
    let per = |n: u64| (delivered > 0).then(|| n as f64 / delivered as f64);
    let diff: Vec<(&String, u64, f64)> = after
        .iter()
        .map(|(op, (n, secs))| {
            let (n0, s0) = before.get(op).copied().unwrap_or((0, 0.0));
            (op, n.saturating_sub(n0), (secs - s0).max(0.0))
        })
        .collect();
    let total: u64 = diff.iter().map(|(_, n, _)| n).sum();
    s.set("store_ops", total);
    s.set("store_ops_per_delivery", per(total));
    for (op, n, secs) in diff.into_iter().filter(|(_, n, _)| *n > 0) {
        s.set(&format!("store_{op}_per_delivery"), per(n));
        s.set(&format!("store_{op}_mean_us"), secs * 1e6 / n as f64);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_store_operations_only() {
        let text = "# HELP x\n\
            skua_backend_operation_duration_seconds_bucket{slot=\"store\",op=\"claim\",le=\"0.001\"} 3\n\
            skua_backend_operation_duration_seconds_count{slot=\"store\",op=\"claim\"} 7\n\
            skua_backend_operation_duration_seconds_count{slot=\"store\",op=\"ack\"} 5\n\
            skua_backend_operation_duration_seconds_count{slot=\"bus\",op=\"publish\"} 9\n";
        let ops = super::parse(text, super::SERIES);
        assert_eq!(ops.len(), 2);
        assert_eq!((ops["claim"], ops["ack"]), (7.0, 5.0));
    }
}
