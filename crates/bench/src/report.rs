//! `skua-bench report`: the JSON lines of one comparison run → markdown tables (one per case,
//! one row per server) and the targets checked against them, written into a document
//! between `<!-- results:begin -->` and `<!-- results:end -->`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Context, bail};

use crate::json::{self, Val};

/// The marker before the generated section.
pub const BEGIN: &str = "<!-- results:begin -->";
/// The marker after it.
pub const END: &str = "<!-- results:end -->";

type Row = BTreeMap<String, Val>;

fn num(r: &Row, k: &str) -> Option<f64> {
    r.get(k).and_then(Val::num)
}

fn s<'a>(r: &'a Row, k: &str) -> &'a str {
    r.get(k).and_then(Val::str).unwrap_or("")
}

fn fmt_n(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.digits$}"))
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |us| format!("{:.2}", us / 1000.0))
}

fn fmt_count(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.0}"))
}

/// Parses JSON lines (other lines are ignored: the file may be a captured stdout).
///
/// # Errors
/// A line that starts like a result but does not parse.
pub fn parse_lines(text: &str) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.starts_with("{\"bench\":\"skua-bench\"") {
            rows.push(json::parse(l).map_err(|e| anyhow::anyhow!("line {}: {e}", i + 1))?);
        }
    }
    Ok(rows)
}

fn bare_cpu<'a>(rows: &'a [&'a Row]) -> Option<f64> {
    rows.iter().find(|r| s(r, "label") == "bare").and_then(|r| num(r, "server_cpu_us_per_msg"))
}

fn traffic_table(out: &mut String, rows: &[&Row]) {
    let bare = bare_cpu(rows);
    out.push_str("| server | delivered msg/s | published msg/s | lost | dup | reord | refused | p50 ms | p99 ms | p99.9 ms | max ms | server CPU % | **server CPU µs / delivered msg** | × bare | bench CPU % | machine CPU % (softirq) | others CPU % |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let cpu = num(r, "server_cpu_us_per_msg");
        let ratio = match (cpu, bare) {
            (Some(c), Some(b)) if b > 0.0 => format!("{:.2}", c / b),
            _ => "n/a".into(),
        };
        let _ = writeln!(
            out,
            "| {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | **{}** | {} | {} | {} ({}) | {} |",
            s(r, "label"),
            s(r, "proto"),
            fmt_count(num(r, "delivered_per_s")),
            fmt_count(num(r, "published_per_s")),
            fmt_count(num(r, "lost")),
            fmt_count(num(r, "duplicated")),
            fmt_count(num(r, "reordered")),
            fmt_count(num(r, "rejected")),
            fmt_ms(num(r, "lat_p50_us")),
            fmt_ms(num(r, "lat_p99_us")),
            fmt_ms(num(r, "lat_p999_us")),
            fmt_ms(num(r, "lat_max_us")),
            fmt_n(num(r, "server_cpu_pct"), 0),
            fmt_n(cpu, 3),
            ratio,
            fmt_n(num(r, "client_cpu_pct"), 0),
            fmt_n(num(r, "machine_cpu_pct"), 0),
            fmt_n(num(r, "softirq_pct"), 0),
            fmt_n(num(r, "other_cpu_pct"), 0),
        );
    }
    if rows.iter().any(|r| r.contains_key("ack_p50_us")) {
        out.push_str("\nAcceptance receipts (`published`, publish → receipt):\n\n| server | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|\n");
        for r in rows.iter().filter(|r| r.contains_key("ack_p50_us")) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                s(r, "label"),
                fmt_ms(num(r, "ack_p50_us")),
                fmt_ms(num(r, "ack_p99_us")),
                fmt_ms(num(r, "ack_max_us"))
            );
        }
    }
}

fn cluster_table(out: &mut String, rows: &[&Row]) {
    out.push_str("| server | nodes | delivered/s | lost | dup | p50 ms | p99 ms | max ms | node 0 (publishers) CPU µs/msg | node 1 CPU µs/msg | broker CPU % | broker CPU µs/msg | **all processes µs/msg** |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | **{}** |",
            s(r, "label"),
            fmt_count(num(r, "nodes")),
            fmt_count(num(r, "delivered_per_s")),
            fmt_count(num(r, "lost")),
            fmt_count(num(r, "duplicated")),
            fmt_ms(num(r, "lat_p50_us")),
            fmt_ms(num(r, "lat_p99_us")),
            fmt_ms(num(r, "lat_max_us")),
            fmt_n(num(r, "server_cpu_us_per_msg"), 3),
            fmt_n(num(r, "node1_cpu_us_per_msg"), 3),
            fmt_n(num(r, "broker_cpu_pct"), 0),
            fmt_n(num(r, "broker_cpu_us_per_msg"), 3),
            fmt_n(num(r, "cluster_cpu_us_per_msg"), 3),
        );
    }
}

fn idle_table(out: &mut String, rows: &[&Row]) {
    out.push_str("| server | connected | still answering | RSS before MiB | RSS after MiB | **KiB / connection** | setups/s | server CPU µs / setup |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let mib = |k| num(r, k).map(|v| v / 1024.0);
        let _ = writeln!(
            out,
            "| {} ({}) | {} | {} | {} | {} | **{}** | {} | {} |",
            s(r, "label"),
            s(r, "proto"),
            fmt_count(num(r, "connected")),
            fmt_count(num(r, "alive_after")),
            fmt_n(mib("rss_before_kib"), 1),
            fmt_n(mib("rss_after_kib"), 1),
            fmt_n(num(r, "kib_per_conn"), 1),
            fmt_count(num(r, "setups_per_s")),
            fmt_n(num(r, "server_cpu_us_per_setup"), 0),
        );
    }
}

fn churn_table(out: &mut String, rows: &[&Row]) {
    out.push_str("| server | target/s | **achieved/s** | errors | setup p50 ms | p99 ms | max ms | server CPU µs / cycle | server CPU % | bench CPU % | machine CPU % | others CPU % |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} ({}) | {} | **{}** | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s(r, "label"),
            s(r, "proto"),
            fmt_count(num(r, "rate_target")),
            fmt_count(num(r, "churn_per_s")),
            fmt_count(num(r, "conn_errors")),
            fmt_ms(num(r, "setup_p50_us")),
            fmt_ms(num(r, "setup_p99_us")),
            fmt_ms(num(r, "setup_max_us")),
            fmt_n(num(r, "server_cpu_us_per_cycle"), 0),
            fmt_n(num(r, "server_cpu_pct"), 0),
            fmt_n(num(r, "client_cpu_pct"), 0),
            fmt_n(num(r, "machine_cpu_pct"), 0),
            fmt_n(num(r, "other_cpu_pct"), 0),
        );
    }
}

/// One checked target: (case, what, measured, met).
type Check = (String, String, String, Option<bool>);

fn find<'a>(rows: &'a [Row], case_prefix: &str, label: &str) -> Option<&'a Row> {
    rows.iter().find(|r| s(r, "case").starts_with(case_prefix) && s(r, "label") == label)
}

fn cpu_of(r: Option<&Row>) -> Option<f64> {
    r.and_then(|r| num(r, "server_cpu_us_per_msg"))
}

fn targets(rows: &[Row]) -> Vec<Check> {
    let mut out = Vec::new();
    let ratio = |case: &str, limit: f64, reference: &str, out: &mut Vec<Check>| {
        let (skua, bare) = (cpu_of(find(rows, case, "skua")), cpu_of(find(rows, case, reference)));
        let met = skua.zip(bare).map(|(a, b)| a <= limit * b);
        let shown = skua.zip(bare).map_or("n/a".into(), |(a, b)| format!("{a:.3} vs {b:.3} µs = {:.2}×", a / b));
        out.push((case.to_owned(), format!("Skua CPU/msg ≤ {limit}× {reference}"), shown, met));
    };
    let below = |case: &str, peer: &str, out: &mut Vec<Check>| {
        let (skua, other) = (cpu_of(find(rows, case, "skua")), cpu_of(find(rows, case, peer)));
        let met = skua.zip(other).map(|(a, b)| a < b);
        let shown = skua.zip(other).map_or("n/a".into(), |(a, b)| format!("{a:.3} vs {b:.3} µs"));
        out.push((case.to_owned(), format!("Skua CPU/msg below {peer}"), shown, met));
    };
    let lost = |case: &str, out: &mut Vec<Check>| {
        let l = find(rows, case, "skua").and_then(|r| num(r, "lost"));
        out.push((case.to_owned(), "nothing lost (Skua)".into(), fmt_count(l), l.map(|l| l == 0.0)));
    };
    let c1 = "fanout S=100 R=10000 P=100";
    lost(c1, &mut out);
    // `bare` sets TCP_NODELAY like Skua does: the like-for-like floor. `bare-nagle` stays in the
    // tables as information (what Nagle's algorithm saves in CPU and costs in latency).
    ratio(c1, 1.3, "bare", &mut out);
    below(c1, "nats", &mut out);
    let p99 = find(rows, c1, "skua").and_then(|r| num(r, "lat_p99_us"));
    out.push((c1.into(), "Skua p99 ≤ 10 ms".into(), format!("{} ms", fmt_ms(p99)), p99.map(|v| v <= 10_000.0)));
    let c2 = "fanout S=1000 R=2000 P=100";
    lost(c2, &mut out);
    ratio(c2, 1.3, "bare", &mut out);
    let c3 = "pairs N=500 r=20 P=100";
    ratio(c3, 1.3, "bare", &mut out);
    below(c3, "mosquitto", &mut out);
    let kib = find(rows, "idle C=10000", "skua").and_then(|r| num(r, "kib_per_conn"));
    out.push((
        "idle C=10000".into(),
        "≤ 10 KiB RSS per connection".into(),
        format!("{} KiB", fmt_n(kib, 1)),
        kib.map(|k| k <= 10.0),
    ));
    let churn = rows
        .iter()
        .find(|r| s(r, "scenario") == "churn" && s(r, "label") == "skua")
        .and_then(|r| num(r, "churn_per_s"));
    out.push((
        "churn".into(),
        "≥ 5000 connect+auth+subscribe/s".into(),
        format!("{}/s", fmt_count(churn)),
        churn.map(|c| c >= 5000.0),
    ));
    lost("cluster nodes=2 S=1000 R=1000 P=100", &mut out);
    out
}

/// The generated markdown section (without markers).
pub fn render(rows: &[Row], run_info: &str) -> String {
    let mut out = String::new();
    if !run_info.is_empty() {
        let _ = writeln!(out, "{run_info}\n");
    }
    let mut cases: Vec<&str> = Vec::new();
    for r in rows {
        if !cases.contains(&s(r, "case")) {
            cases.push(s(r, "case"));
        }
    }
    for case in cases {
        let group: Vec<&Row> = rows.iter().filter(|r| s(r, "case") == case).collect();
        let _ = writeln!(out, "### {case}\n");
        match s(group[0], "scenario") {
            "idle" => idle_table(&mut out, &group),
            "churn" => churn_table(&mut out, &group),
            "cluster" => cluster_table(&mut out, &group),
            _ => traffic_table(&mut out, &group),
        }
        let notes: Vec<String> = group
            .iter()
            .filter(|r| !s(r, "notes").is_empty())
            .map(|r| format!("- {}: {}", s(r, "label"), s(r, "notes")))
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(out, "\n{}", notes.join("\n"));
        }
        out.push('\n');
    }
    out.push_str("### Targets (issue 6)\n\n| case | target | measured | met |\n|---|---|---|---|\n");
    for (case, what, shown, met) in targets(rows) {
        let m = match met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        let _ = writeln!(out, "| {case} | {what} | {shown} | {m} |");
    }
    out
}

/// Replaces the text between the markers of `doc` with `section`.
///
/// # Errors
/// The markers are missing or out of order.
pub fn splice(doc: &str, section: &str) -> anyhow::Result<String> {
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        bail!("the document has no {BEGIN} … {END} markers");
    };
    if e < b {
        bail!("{END} comes before {BEGIN}");
    }
    Ok(format!("{}{BEGIN}\n{section}{}", &doc[..b], &doc[e..]))
}

/// `report`: reads `input`, writes the section into `doc` (or prints it when `doc` is `None`).
///
/// # Errors
/// Unreadable input, or a document without markers.
pub fn run(input: &std::path::Path, doc: Option<&std::path::Path>, run_info: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(input).with_context(|| format!("while reading {}", input.display()))?;
    let rows = parse_lines(&text)?;
    let section = render(&rows, run_info);
    match doc {
        None => print!("{section}"),
        Some(path) => {
            let d = std::fs::read_to_string(path).with_context(|| format!("while reading {}", path.display()))?;
            std::fs::write(path, splice(&d, &section)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_between_markers() {
        let doc = format!("a\n{BEGIN}\nold\n{END}\nz\n");
        assert_eq!(splice(&doc, "new\n").unwrap(), format!("a\n{BEGIN}\nnew\n{END}\nz\n"));
        assert!(splice("no markers", "x").is_err());
    }

    #[test]
    fn targets_compare_skua_with_bare() {
        let l = |label: &str, cpu: f64| {
            format!(
                "{{\"bench\":\"skua-bench\",\"scenario\":\"fanout\",\"case\":\"fanout S=100 R=10000 P=100\",\"label\":\"{label}\",\"server_cpu_us_per_msg\":{cpu},\"lost\":0,\"lat_p99_us\":900}}"
            )
        };
        let rows = parse_lines(&format!("{}\nnoise\n{}\n", l("skua", 1.0), l("bare", 0.9))).unwrap();
        let t = targets(&rows);
        assert_eq!(t[0].3, Some(true));
        assert_eq!(t[1].3, Some(true));
        assert_eq!(t[2].3, None, "no nats row");
        assert!(render(&rows, "").contains("| skua () |"));
    }
}
