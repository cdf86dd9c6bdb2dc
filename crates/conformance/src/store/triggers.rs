//! The [`TriggerStore`](skua_core::TriggerStore) part of the store suite: the trigger outbox
//! (written with its message, leases, claims) and the webhook dead letters (N44, N45). Times
//! are explicit unix ms; no case sleeps.

use std::collections::HashSet;
use std::sync::Arc;

use skua_core::{DeadLetterCap, DeadLetterFilter, NewDeadLetter, NewMessage, OutboxLease, Retention, Store};

use super::{StoreHarness, T0};

const TOPIC: &str = "p/app/room/orders";
/// Unix ms at [`T0`].
const NOW: u64 = T0 * 1000;

async fn append_with(s: &Arc<dyn Store>, id: &str, trigger: Option<OutboxLease<'_>>) {
    let m = NewMessage {
        msg_id: id,
        topic: TOPIC,
        filter: Some("eu"),
        publisher: "alice",
        stream: 0,
        timestamp_ms: NOW + 7,
        qos: 1,
        data: id.as_bytes(),
        trigger,
    };
    s.append(&m, T0).await.expect("append");
}

fn lease(owner: &str, until: u64) -> Option<OutboxLease<'_>> {
    Some(OutboxLease { owner, lease_until_ms: until })
}

async fn claim_ids(s: &Arc<dyn Store>, owner: &str, now: u64, limit: u32) -> Vec<String> {
    let got = s.claim_outbox(owner, now, now + 60_000, limit).await.expect("claim_outbox");
    got.into_iter().map(|t| t.msg_id).collect()
}

/// Contracts 1 and 2: only a message appended with a lease is in the outbox; it is taken over
/// only once its lease ended, with every field of its message.
pub async fn trigger_outbox_is_written_with_its_message<H: StoreHarness>(h: H) {
    let s = h.open().await;
    append_with(&s, "with", lease("n1", NOW + 1000)).await;
    append_with(&s, "without", None).await;
    assert!(claim_ids(&s, "n2", NOW + 999, 10).await.is_empty(), "the lease still runs");
    let got = s.claim_outbox("n2", NOW + 1000, NOW + 5000, 10).await.unwrap();
    assert_eq!(got.len(), 1, "only the message appended with a trigger: {got:?}");
    let t = &got[0];
    assert_eq!(
        (t.msg_id.as_str(), t.topic.as_str(), t.filter.as_deref(), t.publisher.as_str()),
        ("with", TOPIC, Some("eu"), "alice")
    );
    assert_eq!((t.timestamp_ms, &t.data[..], t.attempts), (NOW + 7, &b"with"[..], 0));
    assert!(claim_ids(&s, "n3", NOW + 4999, 10).await.is_empty(), "n2 holds it now");
    assert_eq!(claim_ids(&s, "n3", NOW + 5000, 10).await, ["with"], "and n2's lease ends too");
}

/// Contract 2: concurrent claims through separate handles never take the same trigger, and
/// oldest come first.
pub async fn trigger_claims_hand_each_trigger_once<H: StoreHarness>(h: H) {
    let a = h.open().await;
    let b = h.open().await;
    let ids: Vec<String> = (0..40).map(|i| format!("m{i:02}")).collect();
    for id in &ids {
        append_with(&a, id, lease("gone", 0)).await;
    }
    assert_eq!(claim_ids(&a, "a", NOW, 3).await, ["m00", "m01", "m02"], "oldest first");
    let run = |s: Arc<dyn Store>, owner: &'static str| async move {
        let mut got = Vec::new();
        loop {
            let page = claim_ids(&s, owner, NOW, 4).await;
            if page.is_empty() {
                return got;
            }
            got.extend(page);
        }
    };
    let (x, y) = tokio::join!(run(a.clone(), "x"), run(b.clone(), "y"));
    let mut seen: HashSet<String> = ["m00", "m01", "m02"].into_iter().map(str::to_owned).collect();
    for id in x.iter().chain(&y) {
        assert!(seen.insert(id.clone()), "{id} was claimed twice");
    }
    assert_eq!(seen.len(), ids.len(), "every trigger was claimed once");
}

/// Contract 3: renewing counts attempts and extends the lease only while the owner holds it.
pub async fn trigger_renew_only_while_owned<H: StoreHarness>(h: H) {
    let s = h.open().await;
    append_with(&s, "m", lease("n1", NOW + 100)).await;
    assert_eq!(s.renew_outbox("m", "n1", NOW + 10_000).await.unwrap(), Some(1));
    assert_eq!(s.renew_outbox("m", "n1", NOW + 10_000).await.unwrap(), Some(2));
    assert_eq!(s.renew_outbox("m", "n2", NOW + 20_000).await.unwrap(), None, "n2 does not hold it");
    assert!(claim_ids(&s, "n2", NOW + 9_999, 10).await.is_empty(), "the renewed lease still runs");
    let got = s.claim_outbox("n2", NOW + 10_000, NOW + 20_000, 10).await.unwrap();
    assert_eq!(got.iter().map(|t| t.attempts).collect::<Vec<_>>(), [2], "attempts carry over to the new owner");
    assert_eq!(s.renew_outbox("m", "n1", NOW + 30_000).await.unwrap(), None, "n1 lost it to n2");
    assert_eq!(s.renew_outbox("unknown", "n2", NOW).await.unwrap(), None);
}

fn letter<'a>(id: &'a str, project: &'a str, error: &'a str) -> NewDeadLetter<'a> {
    NewDeadLetter {
        delivery_id: id,
        project,
        kind: "trigger",
        topic: TOPIC,
        target: "http://127.0.0.1:9/hook",
        body: b"{\"deliveryId\":1}",
        last_error: error,
        attempts: 5,
        failed_at_ms: NOW + 1,
    }
}

/// Contract 4: delivered or dead-lettered, a trigger leaves the outbox.
pub async fn trigger_finish_and_dead_letter_leave_the_outbox<H: StoreHarness>(h: H) {
    let s = h.open().await;
    append_with(&s, "done", lease("n1", 0)).await;
    append_with(&s, "failed", lease("n1", 0)).await;
    append_with(&s, "left", lease("n1", 0)).await;
    assert!(s.finish_outbox("done").await.unwrap());
    assert!(!s.finish_outbox("done").await.unwrap(), "already gone");
    assert_eq!(s.dead_letter(&letter("failed", "p", "HTTP 500"), DeadLetterCap::count(100)).await.unwrap(), 0);
    assert_eq!(claim_ids(&s, "n2", NOW, 10).await, ["left"]);
}

/// Contract 4: retention that deletes a message deletes its trigger.
pub async fn trigger_outbox_goes_with_its_message<H: StoreHarness>(h: H) {
    let s = h.open().await;
    for id in ["a", "b", "c"] {
        append_with(&s, id, lease("n1", 0)).await;
    }
    s.prune_log(T0, Retention { max_age_s: 3600, max_per_topic: 1, min_interval_s: 0, batch: 1_000 }).await.unwrap();
    assert_eq!(claim_ids(&s, "n2", NOW, 10).await, ["c"], "the pruned messages' triggers went with them");
}

/// `expire_outbox_leases` ends every lease but the kept owner's.
pub async fn trigger_expire_leases_of_other_owners<H: StoreHarness>(h: H) {
    let s = h.open().await;
    append_with(&s, "old-run", lease("n1#a", NOW + 60_000)).await;
    append_with(&s, "this-run", lease("n1#b", NOW + 60_000)).await;
    assert_eq!(s.expire_outbox_leases("n1#b").await.unwrap(), 1);
    assert_eq!(claim_ids(&s, "n1#b", NOW, 10).await, ["old-run"]);
}

/// Contract 5 and the listing: store order, filters by project and delivery id, a replaced
/// record keeps its place, the cap drops the project's oldest, deletes by filter.
pub async fn trigger_dead_letters_list_replace_cap_and_delete<H: StoreHarness>(h: H) {
    let s = h.open().await;
    for (id, p) in [("d1", "p1"), ("d2", "p2"), ("d3", "p1")] {
        assert_eq!(s.dead_letter(&letter(id, p, "timeout"), DeadLetterCap::count(10)).await.unwrap(), 0);
    }
    let list = |f: DeadLetterFilter<'static>, after: u64| {
        let s = s.clone();
        async move {
            let got = s.list_dead_letters(f, after, 100).await.expect("list_dead_letters");
            got.into_iter().map(|d| d.delivery_id).collect::<Vec<_>>()
        }
    };
    let all = DeadLetterFilter::default();
    assert_eq!(list(all, 0).await, ["d1", "d2", "d3"]);
    let p1 = DeadLetterFilter { project: Some("p1"), delivery_ids: &[] };
    assert_eq!(list(p1, 0).await, ["d1", "d3"]);
    let first = s.list_dead_letters(all, 0, 1).await.unwrap();
    assert_eq!(first.len(), 1, "the limit holds");
    let d1 = &first[0];
    assert_eq!((d1.project.as_str(), d1.kind.as_str(), d1.topic.as_str()), ("p1", "trigger", TOPIC));
    assert_eq!((d1.target.as_str(), &d1.body[..]), ("http://127.0.0.1:9/hook", &b"{\"deliveryId\":1}"[..]));
    assert_eq!((d1.last_error.as_str(), d1.attempts, d1.failed_at_ms), ("timeout", 5, NOW + 1));
    assert_eq!(list(all, d1.id).await, ["d2", "d3"], "paging after an id");

    // A retry that failed again replaces the record in place.
    let mut again = letter("d1", "p1", "HTTP 503");
    again.attempts = 6;
    s.dead_letter(&again, DeadLetterCap::count(10)).await.unwrap();
    let got = s.list_dead_letters(all, 0, 100).await.unwrap();
    assert_eq!(got.iter().map(|d| d.delivery_id.as_str()).collect::<Vec<_>>(), ["d1", "d2", "d3"]);
    assert_eq!((got[0].id, got[0].last_error.as_str(), got[0].attempts), (d1.id, "HTTP 503", 6));

    // The cap counts per project and drops the oldest.
    assert_eq!(s.dead_letter(&letter("d4", "p1", "x"), DeadLetterCap::count(2)).await.unwrap(), 1, "p1 had 3, keeps 2");
    assert_eq!(list(all, 0).await, ["d2", "d3", "d4"]);

    let ids = ["d3".to_owned(), "d2".to_owned()];
    let by_ids = DeadLetterFilter { project: None, delivery_ids: &ids };
    let got = s.list_dead_letters(by_ids, 0, 100).await.unwrap();
    assert_eq!(got.iter().map(|d| d.delivery_id.as_str()).collect::<Vec<_>>(), ["d2", "d3"]);
    let p2_ids = DeadLetterFilter { project: Some("p2"), delivery_ids: &ids };
    assert_eq!(s.delete_dead_letters(p2_ids).await.unwrap(), 1, "only p2's d2");
    assert_eq!(list(all, 0).await, ["d3", "d4"]);
    assert_eq!(s.delete_dead_letters(p1).await.unwrap(), 2);
    assert!(list(all, 0).await.is_empty());
}

/// A batch of dead letters (`dead_letters`): all written in order, an outbox trigger of one of
/// them leaves the outbox, the cap counts per project over the whole batch.
pub async fn trigger_dead_letter_batches_write_all_and_cap<H: StoreHarness>(h: H) {
    let s = h.open().await;
    append_with(&s, "b2", lease("n1#a", NOW + 60_000)).await;
    let batch = [letter("b1", "p1", "full"), letter("b2", "p1", "full"), letter("b3", "p2", "full")];
    assert_eq!(s.dead_letters(&batch, DeadLetterCap::count(10)).await.unwrap(), 0);
    assert_eq!(s.dead_letters(&[], DeadLetterCap::count(10)).await.unwrap(), 0, "an empty batch is nothing");
    let got = s.list_dead_letters(DeadLetterFilter::default(), 0, 100).await.unwrap();
    assert_eq!(got.iter().map(|d| d.delivery_id.as_str()).collect::<Vec<_>>(), ["b1", "b2", "b3"]);
    assert_eq!(claim_ids(&s, "n1#b", NOW + 120_000, 10).await, Vec::<String>::new(), "b2 left the outbox");
    let more = [letter("b4", "p1", "full"), letter("b5", "p1", "full"), letter("b6", "p2", "full")];
    assert_eq!(s.dead_letters(&more, DeadLetterCap::count(2)).await.unwrap(), 2, "p1 had 4, keeps 2");
    let got = s.list_dead_letters(DeadLetterFilter::default(), 0, 100).await.unwrap();
    assert_eq!(got.iter().map(|d| d.delivery_id.as_str()).collect::<Vec<_>>(), ["b3", "b4", "b5", "b6"]);
}

/// Contract 5, bytes: the project's bodies, summed from the newest, stay within `cap.bytes`;
/// the oldest go first, other projects are not touched, and a body larger than the cap alone
/// is not kept.
pub async fn trigger_dead_letters_cap_bytes_per_project<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let with_body = |id: &'static str, p: &'static str, body: &'static [u8]| {
        let mut l = letter(id, p, "full");
        l.body = body;
        l
    };
    let body: &'static [u8] = &[b'x'; 100];
    let cap = DeadLetterCap { count: 100, bytes: 250 };
    for id in ["a1", "a2"] {
        assert_eq!(s.dead_letter(&with_body(id, "p1", body), cap).await.unwrap(), 0);
    }
    assert_eq!(s.dead_letter(&with_body("b1", "p2", body), cap).await.unwrap(), 0);
    assert_eq!(s.dead_letter(&with_body("a3", "p1", body), cap).await.unwrap(), 1, "300 bytes > 250: a1 goes");
    let ids = |got: Vec<skua_core::DeadLetter>| got.into_iter().map(|d| d.delivery_id).collect::<Vec<_>>();
    let all = DeadLetterFilter::default();
    assert_eq!(ids(s.list_dead_letters(all, 0, 100).await.unwrap()), ["a2", "b1", "a3"]);
    let batch = [with_body("a4", "p1", body), with_body("a5", "p1", body)];
    assert_eq!(s.dead_letters(&batch, cap).await.unwrap(), 2, "a batch is capped as a whole");
    assert_eq!(ids(s.list_dead_letters(all, 0, 100).await.unwrap()), ["b1", "a4", "a5"]);
    let huge: &'static [u8] = &[b'y'; 300];
    assert_eq!(s.dead_letter(&with_body("a6", "p1", huge), cap).await.unwrap(), 3, "larger than the cap alone");
    assert_eq!(ids(s.list_dead_letters(all, 0, 100).await.unwrap()), ["b1"]);
}
