//! Group commit of appends (`append_batch` in the store crate), for the SQL stores: appends
//! queued together are committed together, in queue order, and a batch that fails fails every
//! append in it and leaves nothing behind (no message, pending row or outbox row).

use futures_util::future::join_all;
use skua_core::{Consumer, NewMessage, OutboxLease, Store};

const TOPIC: &str = "proj/app/room/orders";

fn message<'a>(id: &'a str, i: u64, owner: Option<&'a str>) -> NewMessage<'a> {
    NewMessage {
        msg_id: id,
        topic: TOPIC,
        filter: None,
        publisher: "bob",
        stream: 0,
        timestamp_ms: 1_000 + i,
        qos: 1,
        data: b"payload",
        trigger: owner.map(|owner| OutboxLease { owner, lease_until_ms: 0 }),
    }
}

/// Appends `ids` at once: on the test's current-thread runtime every append is queued before
/// the writer task runs, so they form one batch. Every fifth carries a trigger.
async fn append_all(store: &dyn Store, ids: &[String], now: u64) -> Vec<Result<u64, skua_core::StoreError>> {
    join_all(ids.iter().enumerate().map(|(i, id)| {
        let owner = (i % 5 == 0).then_some("node-a/1");
        async move { store.append(&message(id, i as u64, owner), now).await }
    }))
    .await
}

pub async fn appends_commit_in_order_and_a_failed_batch_fails_every_append(store: &dyn Store, now: u64) {
    let consumer = Consumer { id: "c1".into(), topic: TOPIC.into(), actor: "alice".into(), filters: Vec::new() };
    store.open_consumer(&consumer, now, 3600).await.unwrap();

    let first: Vec<String> = (0..50).map(|i| format!("m-{i}")).collect();
    let seqs: Vec<u64> = append_all(store, &first, now).await.into_iter().map(Result::unwrap).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seqs follow the queue's order: {seqs:?}");
    assert_eq!(store.backlog("c1").await.unwrap(), (50, *seqs.last().unwrap()), "a pending row per message");

    // One duplicate msgId makes the whole batch fail: every append in it gets the error.
    let mut second: Vec<String> = (0..20).map(|i| format!("n-{i}")).collect();
    second.push("m-3".into());
    let results = append_all(store, &second, now).await;
    assert!(results.iter().all(Result::is_err), "every append of the failed batch fails: {results:?}");
    assert_eq!(store.backlog("c1").await.unwrap().0, 50, "no pending row of the failed batch stayed");

    // Nothing of it was stored: the same ids append now, and the writer carries on.
    second.pop();
    let again = append_all(store, &second, now).await;
    assert!(again.iter().all(Result::is_ok), "{again:?}");
    assert_eq!(store.backlog("c1").await.unwrap().0, 70);

    // Outbox rows: exactly those of the committed batches (every fifth message).
    let claimed = store.claim_outbox("node-b/1", 1, 60_000, 1_000).await.unwrap();
    let mut got: Vec<&str> = claimed.iter().map(|t| t.msg_id.as_str()).collect();
    got.sort_unstable();
    let mut want: Vec<String> = first.iter().step_by(5).chain(second.iter().step_by(5)).cloned().collect();
    want.sort_unstable();
    assert_eq!(got, want, "outbox rows of committed messages only, none of the failed batch");
}

/// More appends of one connection than one batch holds: they go in several batches (on
/// Postgres overlapping, issue 36), still take increasing `seq`s in queue order, every one is
/// stored once, and the store counts its batches' sizes for `/metrics`.
pub async fn a_burst_of_one_connection_spans_batches_in_order(store: &dyn Store, now: u64) {
    let consumer = Consumer { id: "c2".into(), topic: TOPIC.into(), actor: "alice".into(), filters: Vec::new() };
    store.open_consumer(&consumer, now, 3600).await.unwrap();
    let before = store.append_batches().expect("a SQL store counts its batches");
    // Queued one after another, as a connection's pipeline does (`append_queued` returns once
    // the message has its place in the order), then all awaited together.
    let ids: Vec<String> = (0..3000).map(|i| format!("burst-{i}")).collect();
    let mut commits = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        commits.push(store.append_queued(&message(id, i as u64, None), now).await.unwrap());
    }
    let seqs: Vec<u64> = join_all(commits).await.into_iter().map(Result::unwrap).collect();
    let out_of_order: Vec<(usize, u64, u64)> =
        seqs.windows(2).enumerate().filter(|(_, w)| w[0] >= w[1]).map(|(i, w)| (i, w[0], w[1])).take(5).collect();
    assert!(out_of_order.is_empty(), "seqs follow the queue's order across batches: {out_of_order:?}");
    assert_eq!(store.backlog("c2").await.unwrap(), (3000, *seqs.last().unwrap()), "every message stored once");
    let after = store.append_batches().unwrap();
    assert_eq!(after.sum - before.sum, 3000, "every message counted in a batch");
    assert!(after.count - before.count >= 3, "more messages than one batch holds: {after:?}");
    let (le, n) = *after.buckets.last().unwrap();
    assert_eq!((le, n), (1024, after.count), "no batch above its cap");
}
