//! The checker: reads the whole history after the run and judges it. Each check counts what it
//! looked at and its violations; the first violation of each check keeps a history excerpt.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use crate::history::{Ev, Kind, MsgKey, Outcome, encode_key};

/// Faults count from their start until this long after they healed (clients reconnect,
/// subscriptions are made again, the bus resubscribes).
pub const FAULT_SETTLE_MS: u64 = 5_000;
/// How soon after a pause ends the frames a node queued before it reach their connections.
pub const PAUSE_FLUSH_MS: u64 = 1_000;
/// A logged message unclaimed this long after its publish may be taken over by another group
/// member's sweep, out of that member's order: the nodes' `durable_sweep_interval` (5 s by
/// default, which the harness keeps) less a second for the sweep's own store read.
pub const SWEPT_MS: u64 = 4_000;

/// One row of the verdict table.
#[derive(Debug, Default)]
pub struct Row {
    /// What is checked.
    pub name: &'static str,
    /// How many items were checked.
    pub checked: u64,
    /// How many violated it.
    pub violations: u64,
    /// Counted, not violations (e.g. replays, in-fault plain losses).
    pub note: String,
    /// The first violation, with its history excerpt.
    pub first: Option<String>,
    /// Short name for `--tolerate`.
    pub key: &'static str,
    /// Violations are reported but do not fail the run (a known, documented issue).
    pub tolerated: bool,
}

impl Row {
    fn new(key: &'static str, name: &'static str) -> Self {
        Self { key, name, ..Self::default() }
    }

    fn violate(&mut self, what: String, excerpt: &[&Ev]) {
        self.violations += 1;
        if self.first.is_none() {
            let mut s = what;
            for e in excerpt {
                let _ = write!(s, "\n    {}", e.to_json());
            }
            self.first = Some(s);
        }
    }
}

/// What the checker needs to know about the run.
#[derive(Debug)]
pub struct Setup {
    /// Durable group names; members are named `<group>/m<k>`.
    pub groups: Vec<String>,
    /// Plain subscribers' names.
    pub plain_subscribers: Vec<String>,
    /// Presence actors.
    pub presence_actors: Vec<String>,
}

/// The verdict: the rows and a summary of the run.
#[derive(Debug)]
pub struct Verdict {
    /// The checks.
    pub rows: Vec<Row>,
    /// Counts of the run.
    pub summary: Vec<(String, u64)>,
}

impl Verdict {
    /// Whether every check passed.
    pub fn ok(&self) -> bool {
        self.rows.iter().all(|r| r.violations == 0 || r.tolerated)
    }
}

fn key_of(e: &Ev) -> Option<MsgKey> {
    match e {
        Ev::Sent { key, .. } | Ev::Outcome { key, .. } => Some(*key),
        Ev::Delivered { key, .. } | Ev::Trigger { key, .. } => *key,
        _ => None,
    }
}

fn excerpt_for<'a>(h: &'a [Ev], key: MsgKey, consumer: Option<&str>) -> Vec<&'a Ev> {
    let times: Vec<u64> = h.iter().filter(|e| key_of(e) == Some(key)).map(Ev::t).collect();
    let (lo, hi) = (times.iter().min().copied().unwrap_or(0), times.iter().max().copied().unwrap_or(0));
    h.iter()
        .filter(|e| {
            key_of(e) == Some(key)
                || (matches!(e, Ev::FaultStart { .. } | Ev::FaultEnd { .. })
                    && e.t() + 10_000 >= lo
                    && e.t() <= hi + 10_000)
                || consumer.is_some_and(|c| match e {
                    Ev::Subscribed { consumer, .. } | Ev::Disconnected { consumer, .. } => {
                        consumer.starts_with(c) && e.t() + 10_000 >= lo && e.t() <= hi + 10_000
                    }
                    _ => false,
                })
        })
        .take(40)
        .collect()
}

/// A fault's kind for the run counts: its first word, and for a partition the service
/// (`partition-redis`).
fn fault_kind(what: &str) -> String {
    let mut words = what.split_whitespace();
    let first = words.next().unwrap_or("?");
    match words.skip_while(|w| *w != "from").nth(1) {
        Some(to) if first == "partition" => format!("partition-{}", to.trim_end_matches(',')),
        _ => first.to_owned(),
    }
}

/// Whether a fault leaves a node without its store: Postgres stopped, or a node partitioned
/// from it.
fn store_fault(what: &str) -> bool {
    what.starts_with("postgres") || fault_kind(what) == "partition-postgres"
}

/// Judges the history.
pub fn check(h: &[Ev], setup: &Setup, tolerate: &[String]) -> Verdict {
    let mut sent: HashMap<MsgKey, u64> = HashMap::new();
    let mut sent_on: HashMap<MsgKey, u64> = HashMap::new();
    let mut outcome: HashMap<MsgKey, (Outcome, u64)> = HashMap::new();
    let mut faults: Vec<(u64, u64)> = Vec::new();
    let mut open_faults: BTreeMap<String, u64> = BTreeMap::new();
    let mut fault_kinds: BTreeMap<String, u64> = BTreeMap::new();
    for e in h {
        match e {
            Ev::Sent { key, conn, t } => {
                sent.insert(*key, *t);
                sent_on.insert(*key, *conn);
            }
            Ev::Outcome { key, outcome: o, t } => {
                outcome.insert(*key, (o.clone(), *t));
            }
            Ev::FaultStart { what, t } => {
                open_faults.insert(what.clone(), *t);
                let kind = fault_kind(what);
                *fault_kinds.entry(kind).or_default() += 1;
            }
            Ev::FaultEnd { what, t } => {
                let start = open_faults.remove(what).unwrap_or(*t);
                faults.push((start, *t));
            }
            _ => {}
        }
    }
    faults.extend(open_faults.values().map(|s| (*s, u64::MAX / 2)));
    let in_fault = |a: u64, b: u64| faults.iter().any(|(s, e)| a <= e + FAULT_SETTLE_MS && b + 1_000 >= *s);
    // Postgres outages: a live copy whose claim fails is delivered untracked (docs/durable.md,
    // "The store down"), so a second copy inside one is documented, not a violation. A node
    // partitioned from Postgres has the store down as far as it can tell.
    let store_faults: Vec<(u64, u64)> = {
        let mut open = None;
        let mut v = Vec::new();
        for e in h {
            match e {
                Ev::FaultStart { what, t } if store_fault(what) => open = Some(*t),
                Ev::FaultEnd { what, t } if store_fault(what) => v.push((open.take().unwrap_or(*t), *t)),
                _ => {}
            }
        }
        v.extend(open.map(|s| (s, u64::MAX / 2)));
        v
    };
    let store_down = |t: u64| store_faults.iter().any(|(s, e)| t + 1_000 >= *s && t <= e + FAULT_SETTLE_MS);
    let acked = |k: &MsgKey| matches!(outcome.get(k), Some((Outcome::Acked, _)));
    // Pauses per node, and each consumer connection's node: a node paused longer than
    // `node_ttl` is taken for dead, its holds are released and another member gets the message
    // again as a replay; when it resumes, the frame it had queued before the pause still goes
    // out, after that replay (docs/durable.md, "A paused node").
    let mut pauses: Vec<(usize, u64, u64)> = Vec::new();
    let mut open_pauses: BTreeMap<&str, u64> = BTreeMap::new();
    let mut node_of_conn: HashMap<u64, usize> = HashMap::new();
    for e in h {
        match e {
            Ev::FaultStart { what, t } if what.starts_with("pause node") => {
                open_pauses.insert(what, *t);
            }
            Ev::FaultEnd { what, t } if what.starts_with("pause node") => {
                let node = what.split_whitespace().nth(2).and_then(|n| n.parse().ok());
                if let (Some(node), Some(start)) = (node, open_pauses.remove(what.as_str())) {
                    pauses.push((node, start, *t));
                }
            }
            Ev::Subscribed { conn, node, .. } => {
                node_of_conn.insert(*conn, *node);
            }
            _ => {}
        }
    }
    // A live copy that reached its connection within a second of the end of its node's pause,
    // after a replay of the same message to the group during that pause.
    let released_by_pause = |copy: &Ev, earlier: &[&Ev]| {
        let Ev::Delivered { conn, t, .. } = copy else { return false };
        let Some(node) = node_of_conn.get(conn) else { return false };
        pauses.iter().any(|(n, s, end)| {
            n == node
                && *s <= *t
                && *t <= end + PAUSE_FLUSH_MS
                && earlier
                    .iter()
                    .any(|e| matches!(e, Ev::Delivered { replay: true, t: rt, .. } if *s <= *rt && *rt <= *end))
        })
    };

    let mut summary = Vec::new();
    for kind in [Kind::Logged, Kind::Plain] {
        let name = if kind == Kind::Logged { "logged" } else { "plain" };
        let of_kind = || outcome.iter().filter(move |(k, _)| k.0 == kind);
        summary.push((format!("{name} publishes sent"), sent.keys().filter(|k| k.0 == kind).count() as u64));
        summary.push((
            format!("{name} publishes acknowledged"),
            of_kind().filter(|(_, o)| o.0 == Outcome::Acked).count() as u64,
        ));
        summary.push((
            format!("{name} publishes refused"),
            of_kind().filter(|(_, o)| matches!(o.0, Outcome::Refused(_))).count() as u64,
        ));
        summary.push((
            format!("{name} publishes unanswered"),
            of_kind().filter(|(_, o)| o.0 == Outcome::Unknown).count() as u64,
        ));
    }
    for (k, n) in &fault_kinds {
        summary.push((format!("faults: {k}"), *n));
    }

    // Deliveries by consumer group (a group's members share a consumer; plain subscribers are
    // their own).
    let group_of = |c: &str| c.split('/').next().unwrap_or(c).to_owned();
    let mut deliveries: HashMap<(String, MsgKey), Vec<&Ev>> = HashMap::new();
    let mut phantom = Row::new("phantom", "nothing delivered that was never published");
    let mut replays = 0u64;
    for e in h {
        if let Ev::Delivered { consumer, key, raw, replay, .. } = e {
            phantom.checked += 1;
            replays += u64::from(*replay);
            match key {
                Some(k) if sent.contains_key(k) => deliveries.entry((group_of(consumer), *k)).or_default().push(e),
                _ => phantom.violate(format!("{consumer} got {raw:?}, which no publisher sent"), &[e]),
            }
        }
    }
    summary.push(("deliveries".into(), phantom.checked));
    summary.push(("deliveries with isReplay".into(), replays));

    // 1. Every acknowledged logged message reaches every durable group; later copies are replays.
    let mut lost = Row::new("lost", "acked logged message reaches every durable group");
    let mut dups = Row::new("duplicates", "duplicates only as isReplay redeliveries");
    let mut dup_count = 0u64;
    let mut store_dups = 0u64;
    let mut paused_dups = 0u64;
    let mut refused_delivered = 0u64;
    let logged: BTreeSet<MsgKey> = sent.keys().filter(|k| k.0 == Kind::Logged).copied().collect();
    for g in &setup.groups {
        for k in &logged {
            let got = deliveries.get(&(g.clone(), *k));
            if acked(k) {
                lost.checked += 1;
                if got.is_none() {
                    lost.violate(
                        format!("{} was acknowledged (published) but never reached group {g}", encode_key(*k)),
                        &excerpt_for(h, *k, Some(g)),
                    );
                }
            } else if got.is_some() && matches!(outcome.get(k), Some((Outcome::Refused(_), _))) {
                refused_delivered += 1;
            }
            if let Some(got) = got {
                dups.checked += 1;
                dup_count += got.len() as u64 - 1;
                let fresh_copy = |e: &&&Ev| matches!(e, Ev::Delivered { replay: false, .. });
                store_dups += got.iter().skip(1).filter(fresh_copy).filter(|e| store_down(e.t())).count() as u64;
                let unexplained: Vec<usize> =
                    (1..got.len()).filter(|i| fresh_copy(&&got[*i]) && !store_down(got[*i].t())).collect();
                let (paused, unexplained): (Vec<usize>, Vec<usize>) =
                    unexplained.into_iter().partition(|i| released_by_pause(got[*i], &got[..*i]));
                paused_dups += paused.len() as u64;
                if !unexplained.is_empty() {
                    dups.violate(
                        format!("group {g} got {} more than once without isReplay", encode_key(*k)),
                        &excerpt_for(h, *k, Some(g)),
                    );
                }
            }
        }
    }
    dups.note = format!(
        "{dup_count} redeliveries; {store_dups} without isReplay while Postgres was down, \
         {paused_dups} queued before a pause that outlived node_ttl, after their replay (both documented)"
    );
    lost.note = format!("{refused_delivered} refused publishes delivered anyway (stored before the error)");

    // 2. Per-publisher order per consumer connection (first deliveries, replays excluded), for
    // messages sent on one publisher connection: a publish left unanswered on a paused node may
    // arrive after what the publisher sent next through another node.
    let mut order = Row::new("order", "per-publisher order per consumer connection");
    // A logged message published inside a fault window may have missed the bus and come later
    // from the store (the durable sweep, a kick): counted. Outside fault windows, and on the
    // plain topic always, order must hold. Second copies are the duplicates check's.
    let mut last: HashMap<(String, u64, usize, Kind, u64), &Ev> = HashMap::new();
    let mut seen_by: std::collections::HashSet<(String, MsgKey)> = std::collections::HashSet::new();
    let mut reordered = 0u64;
    let mut swept = 0u64;
    for e in h {
        if let Ev::Delivered { consumer, conn, key: Some(k), replay: false, t, .. } = e {
            if !seen_by.insert((group_of(consumer), *k)) {
                continue;
            }
            order.checked += 1;
            let slot = (consumer.clone(), *conn, k.1, k.0, sent_on.get(k).copied().unwrap_or(0));
            if let Some(prev) = last.get(&slot)
                && let Ev::Delivered { key: Some(pk), .. } = prev
                && pk.2 >= k.2
            {
                let published = sent.get(k).copied().unwrap_or(0);
                let acked_at = outcome.get(k).map_or(published, |o| o.1);
                if k.0 == Kind::Logged && in_fault(published, acked_at) {
                    reordered += 1;
                } else if k.0 == Kind::Logged && t.saturating_sub(published) >= SWEPT_MS {
                    // Unclaimed for a whole durable_sweep_interval (its member was that far
                    // behind): another member's sweep took it (docs/durable.md, "Order in a
                    // group").
                    swept += 1;
                } else {
                    let (p, ex) = (*prev, e);
                    order.violate(
                        format!("{consumer} (connection {conn}) got {} after {}", encode_key(*k), encode_key(*pk)),
                        &[p, ex],
                    );
                }
            }
            if last.get(&slot).is_none_or(|p| matches!(p, Ev::Delivered { key: Some(pk), .. } if pk.2 < k.2)) {
                last.insert(slot, e);
            }
        }
    }
    order.note = format!(
        "{reordered} logged messages published inside a fault window came late from the store, \
         {swept} taken over by a sweep after waiting {SWEPT_MS} ms or more (both allowed)"
    );

    // 3. Every acknowledged logged message's trigger reaches the receiver.
    let mut triggers = Row::new("triggers", "acked logged message's trigger reaches the receiver");
    let mut trig: HashMap<MsgKey, u64> = HashMap::new();
    let mut phantom_triggers = 0u64;
    for e in h {
        if let Ev::Trigger { key, raw, .. } = e {
            match key {
                Some(k) if sent.contains_key(k) && k.0 == Kind::Logged => *trig.entry(*k).or_default() += 1,
                _ => {
                    phantom_triggers += 1;
                    triggers.violate(format!("trigger for {raw:?}, which no logged publish sent"), &[e]);
                }
            }
        }
    }
    for k in logged.iter().filter(|k| acked(k)) {
        triggers.checked += 1;
        if !trig.contains_key(k) {
            triggers.violate(
                format!("{} was acknowledged but its trigger never arrived", encode_key(*k)),
                &excerpt_for(h, *k, None),
            );
        }
    }
    let trig_dups: u64 = trig.values().map(|n| n - 1).sum();
    triggers.note = format!("{trig_dups} duplicate requests (same deliveryId, retried), {phantom_triggers} unexpected");

    // 4. Presence converges to the truth within 15 s after the last fault.
    let mut presence = Row::new("presence", "presence converges within 15 s of the last fault");
    let mut truth: BTreeMap<&str, bool> = setup.presence_actors.iter().map(|a| (a.as_str(), false)).collect();
    for e in h {
        if let Ev::PresenceIntent { actor, joined, .. } = e {
            truth.insert(actor.as_str(), *joined);
        }
    }
    let want: Vec<String> = truth.iter().filter(|(_, j)| **j).map(|(a, _)| (*a).to_owned()).collect();
    let mut seen: BTreeMap<usize, (&Vec<String>, &Ev)> = BTreeMap::new();
    for e in h {
        if let Ev::PresenceSeen { node, actors, .. } = e {
            seen.insert(*node, (actors, e));
        }
    }
    for (node, (actors, e)) in &seen {
        presence.checked += 1;
        if **actors != want {
            // The differing actors' last changes and the faults of the last 30 s before it.
            let odd: Vec<&String> = actors
                .iter()
                .filter(|a| !want.contains(a))
                .chain(want.iter().filter(|a| !actors.contains(a)))
                .collect();
            let mut ex: Vec<&Ev> = h
                .iter()
                .filter(|x| match x {
                    Ev::PresenceIntent { actor, .. } => odd.contains(&actor),
                    Ev::FaultStart { t, .. } | Ev::FaultEnd { t, .. } => t + 30_000 >= e.t(),
                    _ => false,
                })
                .collect();
            let keep = ex.len().saturating_sub(12);
            ex.drain(..keep);
            ex.push(e);
            presence.violate(format!("node {node} reports {actors:?}, the truth is {want:?}"), &ex);
        }
    }
    if seen.is_empty() {
        presence.violate("no presence snapshot was taken".into(), &[]);
    }

    // 5. Plain topic: loss outside fault windows is a violation, inside is counted.
    let mut plain = Row::new("plain", "plain messages lost outside fault windows");
    let mut windows: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    let mut opened: HashMap<(&str, u64), u64> = HashMap::new();
    for e in h {
        match e {
            Ev::Subscribed { consumer, conn, t, .. } => {
                opened.insert((consumer.as_str(), *conn), *t);
            }
            Ev::Disconnected { consumer, conn, t, .. } => {
                if let Some(s) = opened.remove(&(consumer.as_str(), *conn)) {
                    windows.entry(consumer.as_str()).or_default().push((s, *t));
                }
            }
            _ => {}
        }
    }
    for ((c, _), s) in opened {
        windows.entry(c).or_default().push((s, u64::MAX / 2));
    }
    let (mut in_fault_lost, mut uncovered) = (0u64, 0u64);
    for s in &setup.plain_subscribers {
        let w = windows.get(s.as_str()).cloned().unwrap_or_default();
        for (k, (o, t_ack)) in outcome.iter().filter(|(k, _)| k.0 == Kind::Plain) {
            if *o != Outcome::Acked {
                continue;
            }
            let t_sent = sent[k];
            // Subscribed strictly before the send: `subscribed` and the publish in the same
            // millisecond may have met the server in either order (seen in a 60-minute soak).
            if !w.iter().any(|(a, b)| *a < t_sent && *b >= t_ack + 1_000) {
                uncovered += 1;
                continue;
            }
            plain.checked += 1;
            if deliveries.contains_key(&(s.clone(), *k)) {
                continue;
            }
            if in_fault(t_sent, *t_ack) {
                in_fault_lost += 1;
            } else {
                plain.violate(
                    format!("{s} was subscribed throughout, no fault was near, and {} never arrived", encode_key(*k)),
                    &excerpt_for(h, *k, Some(s)),
                );
            }
        }
    }
    plain.note =
        format!("{in_fault_lost} lost inside fault windows (allowed), {uncovered} while the subscriber was away");

    // Latency of the first delivery of each acknowledged logged message to each group.
    let mut first: HashMap<(String, MsgKey), u64> = HashMap::new();
    for e in h {
        if let Ev::Delivered { consumer, key: Some(k), t, .. } = e {
            first.entry((group_of(consumer), *k)).or_insert(*t);
        }
    }
    let mut lat: Vec<u64> = Vec::new();
    for g in &setup.groups {
        for k in logged.iter().filter(|k| acked(k)) {
            if let Some(t) = first.get(&(g.clone(), *k)) {
                lat.push(t.saturating_sub(sent[k]));
            }
        }
    }
    lat.sort_unstable();
    let pct = |p: usize| lat.get((lat.len().saturating_sub(1)) * p / 100).copied().unwrap_or(0);
    summary.push(("logged first-delivery latency p50 (ms)".into(), pct(50)));
    summary.push(("logged first-delivery latency p99 (ms)".into(), pct(99)));
    summary.push(("logged first-delivery latency max (ms)".into(), lat.last().copied().unwrap_or(0)));
    summary
        .push(("logged first deliveries later than 10 s".into(), lat.iter().filter(|l| **l > 10_000).count() as u64));

    let mut rows = vec![lost, dups, order, phantom, triggers, presence, plain];
    for r in &mut rows {
        r.tolerated = tolerate.iter().any(|t| t == r.key);
    }
    Verdict { rows, summary }
}

/// The verdict as a table.
pub fn render(v: &Verdict, seed: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\nchaos verdict (seed {seed})");
    let _ = writeln!(s, "{:<11} {:<52} {:>8} {:>10}  note", "key", "check", "checked", "violations");
    for r in &v.rows {
        let tol = if r.tolerated && r.violations > 0 { " (TOLERATED: known issue, --tolerate)" } else { "" };
        let _ = writeln!(s, "{:<11} {:<52} {:>8} {:>10}  {}{tol}", r.key, r.name, r.checked, r.violations, r.note);
    }
    let _ = writeln!(s, "\nrun:");
    for (k, n) in &v.summary {
        let _ = writeln!(s, "  {k:<40} {n}");
    }
    for r in v.rows.iter().filter(|r| r.first.is_some()) {
        let _ = writeln!(s, "\nFIRST VIOLATION of \"{}\": {}", r.name, r.first.as_deref().unwrap_or(""));
    }
    let _ = writeln!(s, "\n{} (seed {seed})", if v.ok() { "PASS" } else { "FAIL" });
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Kind, Outcome};

    fn delivered(consumer: &str, conn: u64, key: MsgKey, replay: bool, t: u64) -> Ev {
        Ev::Delivered {
            consumer: consumer.into(),
            conn,
            raw: encode_key(key),
            key: Some(key),
            msg_id: Some("m".into()),
            replay,
            t,
        }
    }

    /// Seed 1 (30 min): a message queued for `g0/m0` on node 0, node 0 paused past `node_ttl`,
    /// the message replayed to `g0/m1` on node 2, then node 0's queued copy flushed on resume.
    fn paused_history(with_pause: bool) -> Vec<Ev> {
        let k = (Kind::Logged, 0, 9496);
        let pause = "pause node 0 (SIGSTOP) for 3715 ms".to_owned();
        let mut h = vec![
            Ev::Subscribed { consumer: "g0/m0".into(), conn: 353, node: 0, t: 1_000 },
            Ev::Subscribed { consumer: "g0/m1".into(), conn: 362, node: 2, t: 1_089_071 },
            Ev::Sent { key: k, conn: 359, t: 1_089_372 },
            Ev::Outcome { key: k, outcome: Outcome::Acked, t: 1_089_404 },
        ];
        if with_pause {
            h.push(Ev::FaultStart { what: pause.clone(), t: 1_089_404 });
        }
        h.push(delivered("g0/m1", 362, k, true, 1_092_896));
        if with_pause {
            h.push(Ev::FaultEnd { what: pause, t: 1_093_125 });
        }
        h.push(delivered("g0/m0", 353, k, false, 1_093_126));
        h
    }

    fn duplicates(h: &[Ev]) -> u64 {
        let setup = Setup { groups: vec!["g0".into()], plain_subscribers: vec![], presence_actors: vec![] };
        let v = check(h, &setup, &[]);
        v.rows.iter().find(|r| r.key == "duplicates").map(|r| r.violations).unwrap_or(u64::MAX)
    }

    #[test]
    fn a_live_copy_flushed_by_a_resumed_node_after_its_replay_is_not_a_violation() {
        assert_eq!(duplicates(&paused_history(true)), 0);
    }

    #[test]
    fn a_live_copy_after_a_replay_without_a_pause_is_a_violation() {
        assert_eq!(duplicates(&paused_history(false)), 1);
    }

    /// Two logged messages of one publisher connection to a group member, the older first
    /// delivered `late_by` ms after its publish, after the newer one; no fault.
    fn late_in_group(late_by: u64) -> Vec<Ev> {
        let (old, new) = ((Kind::Logged, 0, 1), (Kind::Logged, 0, 2));
        vec![
            Ev::Subscribed { consumer: "g0/m0".into(), conn: 7, node: 0, t: 1_000 },
            Ev::Sent { key: old, conn: 3, t: 2_000 },
            Ev::Outcome { key: old, outcome: Outcome::Acked, t: 2_010 },
            Ev::Sent { key: new, conn: 3, t: 2_020 },
            Ev::Outcome { key: new, outcome: Outcome::Acked, t: 2_030 },
            delivered("g0/m0", 7, new, false, 2_040),
            delivered("g0/m0", 7, old, false, 2_000 + late_by),
        ]
    }

    fn order_violations(h: &[Ev]) -> u64 {
        let setup = Setup { groups: vec!["g0".into()], plain_subscribers: vec![], presence_actors: vec![] };
        let v = check(h, &setup, &[]);
        v.rows.iter().find(|r| r.key == "order").map(|r| r.violations).unwrap_or(u64::MAX)
    }

    #[test]
    fn a_group_message_taken_over_by_a_sweep_may_come_out_of_order() {
        assert_eq!(order_violations(&late_in_group(SWEPT_MS + 100)), 0);
    }

    #[test]
    fn a_group_message_out_of_order_before_any_sweep_could_take_it_is_a_violation() {
        assert_eq!(order_violations(&late_in_group(600)), 1);
    }

    /// A plain message sent at `sent`, acked at once, never delivered to `s0`, whose
    /// subscription was confirmed at `subscribed`; no fault.
    fn plain_violations(subscribed: u64, sent: u64) -> u64 {
        let k = (Kind::Plain, 0, 1);
        let h = vec![
            Ev::Subscribed { consumer: "s0".into(), conn: 5, node: 0, t: subscribed },
            Ev::Sent { key: k, conn: 3, t: sent },
            Ev::Outcome { key: k, outcome: Outcome::Acked, t: sent },
        ];
        let setup = Setup { groups: vec![], plain_subscribers: vec!["s0".into()], presence_actors: vec![] };
        let v = check(&h, &setup, &[]);
        v.rows.iter().find(|r| r.key == "plain").map(|r| r.violations).unwrap_or(u64::MAX)
    }

    #[test]
    fn a_plain_message_sent_in_the_millisecond_of_the_subscription_is_not_counted() {
        assert_eq!(plain_violations(1_806_467, 1_806_467), 0);
    }

    #[test]
    fn a_plain_message_sent_after_the_subscription_and_lost_is_a_violation() {
        assert_eq!(plain_violations(1_806_466, 1_806_467), 1);
    }

    #[test]
    fn partitions_are_counted_by_service_and_from_postgres_is_a_store_fault() {
        assert_eq!(fault_kind("partition node 1 from redis, heal after 3000 ms"), "partition-redis");
        assert_eq!(fault_kind("kill9 node 0, restart after 1000 ms"), "kill9");
        assert!(store_fault("partition node 2 from postgres, heal after 2500 ms"));
        assert!(store_fault("postgres stop (fast shutdown), restart after 900 ms"));
        assert!(!store_fault("partition node 2 from mosquitto, heal after 2500 ms"));
    }
}
