//! The [`MemberStore`](skua_core::MemberStore) part of the store suite: persistent presence
//! members (N46) and the wake arbiter (N47). Times are explicit; no case sleeps.

use std::sync::Arc;

use skua_core::{MemberStatus, MemberWrite, Store, StoredMember};

use super::{StoreHarness, T0};

const ROOM: &str = "p/app/room";
const TTL: u64 = 3600;

fn write<'a>(actor: &'a str, client: &'a str, data: &'a [u8], advert: &'a [u8], node: &'a str) -> MemberWrite<'a> {
    MemberWrite {
        room: ROOM,
        actor,
        client_id: client,
        data,
        advertisement: advert,
        wake: Some(r#"{"url":"http://127.0.0.1:9/wake","headers":{}}"#),
        node,
        now_s: T0,
        expires_at_s: T0 + TTL,
        project_limit: 0,
    }
}

async fn list(s: &Arc<dyn Store>, now: u64) -> Vec<StoredMember> {
    s.list_members(ROOM, now, 100).await.expect("list_members")
}

/// Contract 1: an upsert creates the record online, keeps `joined_at`, and bumps the
/// advertisement version only when the advertisement changed; offline, list, delete.
pub async fn member_upsert_versions_offline_and_delete<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let m = s.upsert_member(&write("a1", "c1", b"d1", b"v1", "n1")).await.unwrap().unwrap();
    assert_eq!((m.status, m.advertisement_version, m.joined_at), (MemberStatus::Online, 1, T0));
    assert_eq!(m.wake.as_deref(), Some(r#"{"url":"http://127.0.0.1:9/wake","headers":{}}"#));
    let later = MemberWrite { now_s: T0 + 5, ..write("a1", "c1", b"d2", b"v1", "n1") };
    let m = s.upsert_member(&later).await.unwrap().unwrap();
    assert_eq!((m.advertisement_version, m.joined_at, &m.data[..]), (1, T0, &b"d2"[..]), "same advertisement");
    let m = s.upsert_member(&write("a1", "c1", b"d3", b"v2", "n1")).await.unwrap().unwrap();
    assert_eq!(m.advertisement_version, 2, "a new advertisement");
    s.upsert_member(&write("a1", "c2", b"x", b"", "n1")).await.unwrap();
    s.upsert_member(&write("a2", "", b"y", b"", "n2")).await.unwrap();
    assert_eq!(list(&s, T0).await.len(), 3);

    let off = s.members_offline(ROOM, "a1", T0 + TTL).await.unwrap();
    assert_eq!(off.len(), 2, "both clientIds of a1: {off:?}");
    assert!(off.iter().all(|m| m.status == MemberStatus::Offline));
    assert!(s.members_offline(ROOM, "a1", T0 + TTL).await.unwrap().is_empty(), "already offline");
    let statuses: Vec<_> = list(&s, T0).await.into_iter().map(|m| (m.actor, m.client_id, m.status)).collect();
    assert_eq!(
        statuses,
        [
            ("a1".into(), "c1".into(), MemberStatus::Offline),
            ("a1".into(), "c2".into(), MemberStatus::Offline),
            ("a2".into(), String::new(), MemberStatus::Online)
        ]
    );
    assert_eq!(s.delete_members(ROOM, "a1").await.unwrap(), 2);
    assert_eq!(list(&s, T0).await.len(), 1);
    assert!(s.list_members("p/app/other", T0, 100).await.unwrap().is_empty());
}

/// Contract 2: of concurrent `begin_wake` calls through separate handles, exactly one wins; a
/// waking member is no candidate; `end_wake` and `expired_wakes` bring it back.
pub async fn member_wake_is_won_once<H: StoreHarness>(h: H) {
    let s = h.open().await;
    s.upsert_member(&write("a1", "c1", b"d", b"", "n1")).await.unwrap();
    let mut nowake = write("a2", "c1", b"d", b"", "n1");
    nowake.wake = None;
    s.upsert_member(&nowake).await.unwrap();
    assert!(s.wake_candidates(ROOM, T0, 10).await.unwrap().is_empty(), "online members are not woken");
    s.members_offline(ROOM, "a1", T0 + TTL).await.unwrap();
    s.members_offline(ROOM, "a2", T0 + TTL).await.unwrap();
    let c = s.wake_candidates(ROOM, T0, 10).await.unwrap();
    assert_eq!(c.iter().map(|m| m.actor.as_str()).collect::<Vec<_>>(), ["a1"], "only wake-enabled ones");

    let handles = [h.open().await, h.open().await, h.open().await, h.open().await];
    let tries = handles.iter().map(|s| s.begin_wake(ROOM, "a1", "c1", 5_000));
    let won = futures_util::future::join_all(tries).await.into_iter().filter(|r| *r.as_ref().unwrap()).count();
    assert_eq!(won, 1);
    assert!(s.wake_candidates(ROOM, T0, 10).await.unwrap().is_empty());
    assert_eq!(list(&s, T0).await[0].status, MemberStatus::Waking);

    assert!(s.end_wake(ROOM, "a1", "c1").await.unwrap());
    assert!(!s.end_wake(ROOM, "a1", "c1").await.unwrap(), "no longer waking");
    assert!(s.begin_wake(ROOM, "a1", "c1", 5_000).await.unwrap(), "wakeable again");
    assert!(s.expired_wakes(4_999, 10).await.unwrap().is_empty());
    let back = s.expired_wakes(5_000, 10).await.unwrap();
    assert_eq!((back.len(), back[0].status), (1, MemberStatus::Offline));
    // Connecting while waking makes it online (and no longer a candidate).
    assert!(s.begin_wake(ROOM, "a1", "c1", 9_000).await.unwrap());
    s.upsert_member(&write("a1", "c1", b"d", b"", "n1")).await.unwrap();
    assert!(s.expired_wakes(10_000, 10).await.unwrap().is_empty());
}

/// Contract 3 and node restarts: records not online expire; another run's online ones go
/// offline; `list_members` honours its limit.
pub async fn member_expiry_other_nodes_and_limit<H: StoreHarness>(h: H) {
    let s = h.open().await;
    s.upsert_member(&write("a1", "", b"d", b"", "old")).await.unwrap();
    s.upsert_member(&write("a2", "", b"d", b"", "me")).await.unwrap();
    s.upsert_member(&write("a3", "", b"d", b"", "old")).await.unwrap();
    let off = s.other_nodes_members_offline("me", T0 + 10).await.unwrap();
    let mut actors: Vec<_> = off.iter().map(|m| m.actor.clone()).collect();
    actors.sort();
    assert_eq!(actors, ["a1", "a3"]);
    assert_eq!(s.list_members(ROOM, T0, 2).await.unwrap().len(), 2, "the limit");
    assert_eq!(list(&s, T0 + 10).await.len(), 1, "expired ones are not listed (the online one is)");
    assert!(s.expire_members(T0 + 9, 100).await.unwrap().is_empty());
    let gone = s.expire_members(T0 + 10, 100).await.unwrap();
    assert_eq!(gone.len(), 2);
    let left: Vec<_> = list(&s, T0 + 10).await.into_iter().map(|m| m.actor).collect();
    assert_eq!(left, ["a2"], "an online member never expires");
}

/// Contract 4 (issue 33): a project at its limit gets no new record, while its members still
/// replace their own and another project is not affected; a removed record makes room.
pub async fn member_project_limit_is_per_project<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let limited = |actor: &'static str, room: &'static str| MemberWrite {
        room,
        project_limit: 2,
        ..write(actor, "c", b"d", b"", "n1")
    };
    // `p/…` and `p2/…`: one project's name is a prefix of the other's.
    assert!(s.upsert_member(&limited("a1", ROOM)).await.unwrap().is_some());
    assert!(s.upsert_member(&limited("a2", "p/app/other")).await.unwrap().is_some());
    assert!(s.upsert_member(&limited("a3", ROOM)).await.unwrap().is_none(), "a third record of p");
    assert_eq!(list(&s, T0).await.len(), 1, "nothing written");
    let again = MemberWrite { data: b"d2", ..limited("a1", ROOM) };
    let m = s.upsert_member(&again).await.unwrap().expect("a member replaces its own record at the limit");
    assert_eq!(&m.data[..], b"d2");
    for actor in ["b1", "b2"] {
        assert!(s.upsert_member(&limited(actor, "p2/app/room")).await.unwrap().is_some(), "p2 has its own limit");
    }
    assert!(s.upsert_member(&limited("b3", "p2/app/room")).await.unwrap().is_none());
    // Offline records still count; a removed one makes room.
    s.members_offline("p/app/other", "a2", T0 + TTL).await.unwrap();
    assert!(s.upsert_member(&limited("a3", ROOM)).await.unwrap().is_none(), "offline records count");
    assert_eq!(s.delete_members("p/app/other", "a2").await.unwrap(), 1);
    assert!(s.upsert_member(&limited("a3", ROOM)).await.unwrap().is_some());
    // Without a limit (0) nothing is refused.
    assert!(s.upsert_member(&write("a4", "c", b"d", b"", "n1")).await.unwrap().is_some());
}
