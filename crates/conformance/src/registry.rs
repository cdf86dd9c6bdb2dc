//! The [`RegistryStore`] suite: every guarantee of the registry store's contract, as test
//! bodies. Each harness gives an empty registry (a fresh database).

use std::future::Future;
use std::sync::Arc;

use skua_core::RegistryStore;
use skua_core::registry_store::{
    ActorRecord, AnnotationsRecord, ApplyError, Change, ConnectionRecord, LimitsRecord, Object, ObjectKey, ObjectKind,
    ProjectRecord, RoomRecord, TokenRecord,
};

use super::within;

/// Opens handles onto one empty registry store.
pub trait RegistryHarness {
    /// A handle onto the harness's one store, as another node would open it.
    fn open(&self) -> impl Future<Output = Arc<dyn RegistryStore>>;
}

/// Generates one `#[tokio::test]` per case of the [`RegistryStore`] suite; the forms are those
/// of [`store_conformance!`](crate::store_conformance).
#[macro_export]
macro_rules! registry_store_conformance {
    (setup = $setup:expr $(,)?) => {
        $crate::registry_store_conformance!(@cases setup, $setup);
    };
    (@cases $how:ident, $harness:expr) => {
        $crate::__conformance_tests!(registry, $how, $harness;
            an_empty_registry_is_at_version_0,
            apply_writes_atomically_and_bumps_the_version,
            a_stale_version_conflicts_and_changes_nothing,
            put_replaces_and_delete_removes,
            concurrent_writers_serialise,
            usage_adds_up_per_project_and_period,
            changes_are_shared_between_handles,
            connections_are_listed_for_live_nodes_only,
        );
    };
    ($harness:expr $(,)?) => {
        $crate::registry_store_conformance!(@cases make, $harness);
    };
}

fn project(id: &str) -> Object {
    Object::Project(ProjectRecord {
        id: id.into(),
        name: format!("Project {id}"),
        jwt_secret: Some("s3cret".into()),
        wake_secret: None,
        limits: LimitsRecord { max_connections: Some(5), monthly_message_quota: Some(10), ..LimitsRecord::default() },
        created_at_ms: 1,
    })
}

fn room(slug: &str) -> Object {
    Object::Room(RoomRecord {
        project: "p".into(),
        app: "p-app".into(),
        slug: slug.into(),
        name: slug.into(),
        dynamic: true,
        created_at_ms: 2,
        // Free-form fields ride in the stored JSON (issue 31): the round trip keeps them.
        annotations: AnnotationsRecord {
            description: Some(format!("room {slug}")),
            external_id: Some("ext-1".into()),
            metadata: Some(r#"{"k":[1,"two"]}"#.into()),
        },
    })
}

fn actor(id: &str) -> Object {
    Object::Actor(ActorRecord {
        project: "p".into(),
        id: id.into(),
        actor_type: "agent".into(),
        name: id.into(),
        active: true,
        rate_limit: None,
        disconnect_before_ms: None,
        created_at_ms: 3,
        scope: None,
        annotations: AnnotationsRecord::default(),
    })
}

async fn apply(s: &Arc<dyn RegistryStore>, v: u64, changes: Vec<Change>) -> Result<u64, ApplyError> {
    within("apply", s.apply(v, &changes)).await
}

/// Contract 2 and 3: nothing written, nothing loaded, version 0.
pub async fn an_empty_registry_is_at_version_0<H: RegistryHarness>(h: H) {
    let s = h.open().await;
    assert_eq!(within("version", s.version()).await.unwrap(), 0);
    let snap = within("load", s.load()).await.unwrap();
    assert_eq!(snap.version, 0);
    assert!(snap.data.objects().is_empty());
}

/// Contract 1: a change set lands whole, at the next version.
pub async fn apply_writes_atomically_and_bumps_the_version<H: RegistryHarness>(h: H) {
    let s = h.open().await;
    let v =
        apply(&s, 0, vec![Change::Put(project("p")), Change::Put(room("r1")), Change::Put(actor("a1"))]).await.unwrap();
    assert_eq!(v, 1);
    let snap = within("load", s.load()).await.unwrap();
    assert_eq!(snap.version, 1);
    assert_eq!(snap.data.objects(), vec![project("p"), room("r1"), actor("a1")]);
    assert_eq!(within("version", s.version()).await.unwrap(), 1);
}

/// Contract 1: a writer working from an old version is refused and writes nothing.
pub async fn a_stale_version_conflicts_and_changes_nothing<H: RegistryHarness>(h: H) {
    let s = h.open().await;
    apply(&s, 0, vec![Change::Put(project("p"))]).await.unwrap();
    match apply(&s, 0, vec![Change::Put(room("r1"))]).await {
        Err(ApplyError::Conflict { current }) => assert_eq!(current, 1),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let snap = within("load", s.load()).await.unwrap();
    assert_eq!((snap.version, snap.data.objects()), (1, vec![project("p")]));
}

/// Puts replace by key; deletes remove, and deleting an absent key is not an error.
pub async fn put_replaces_and_delete_removes<H: RegistryHarness>(h: H) {
    let s = h.open().await;
    apply(&s, 0, vec![Change::Put(project("p")), Change::Put(room("r1"))]).await.unwrap();
    let Object::Project(mut p) = project("p") else { unreachable!("project() builds a project") };
    p.name = "renamed".into();
    let token = Object::Token(TokenRecord {
        key_id: "k1".into(),
        actor: "a1".into(),
        sha256: "00".repeat(32),
        created_at_ms: 4,
    });
    apply(
        &s,
        1,
        vec![
            Change::Put(Object::Project(p.clone())),
            Change::Delete(ObjectKey { kind: ObjectKind::Room, key: "p-app/r1".into() }),
            Change::Delete(ObjectKey { kind: ObjectKind::Room, key: "p-app/absent".into() }),
            Change::Put(token.clone()),
        ],
    )
    .await
    .unwrap();
    let snap = within("load", s.load()).await.unwrap();
    assert_eq!(snap.data.objects(), vec![Object::Project(p), token]);
}

/// Contract 1: writers that retry on conflict never lose each other's writes.
pub async fn concurrent_writers_serialise<H: RegistryHarness>(h: H) {
    let (a, b) = (h.open().await, h.open().await);
    let writer = |s: Arc<dyn RegistryStore>, prefix: &'static str| async move {
        for i in 0..10 {
            loop {
                let v = s.version().await.unwrap();
                match s.apply(v, &[Change::Put(room(&format!("{prefix}{i}")))]).await {
                    Ok(_) => break,
                    Err(ApplyError::Conflict { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
    };
    let (x, y) =
        within("two writers", async { tokio::join!(tokio::spawn(writer(a, "a")), tokio::spawn(writer(b, "b"))) }).await;
    x.unwrap();
    y.unwrap();
    let s = h.open().await;
    let snap = within("load", s.load()).await.unwrap();
    assert_eq!(snap.version, 20);
    assert_eq!(snap.data.rooms.len(), 20);
}

/// Contract 4: usage counters add up, per project and per period.
pub async fn usage_adds_up_per_project_and_period<H: RegistryHarness>(h: H) {
    let s = h.open().await;
    assert_eq!(within("usage", s.usage("p", "2026-12")).await.unwrap(), 0);
    assert_eq!(within("add", s.add_usage("p", "2026-12", 5)).await.unwrap(), 5);
    assert_eq!(within("add", s.add_usage("p", "2026-12", 7)).await.unwrap(), 12);
    assert_eq!(within("add", s.add_usage("p", "2027-01", 1)).await.unwrap(), 1);
    assert_eq!(within("add", s.add_usage("q", "2026-12", 2)).await.unwrap(), 2);
    assert_eq!(within("usage", s.usage("p", "2026-12")).await.unwrap(), 12);
}

/// What one handle writes, another handle (another node) loads.
pub async fn changes_are_shared_between_handles<H: RegistryHarness>(h: H) {
    let (a, b) = (h.open().await, h.open().await);
    apply(&a, 0, vec![Change::Put(project("p"))]).await.unwrap();
    assert_eq!(within("version", b.version()).await.unwrap(), 1);
    assert_eq!(within("load", b.load()).await.unwrap().data.objects(), vec![project("p")]);
}

fn conn(node: &str, id: &str, actor: &str, at: u64) -> ConnectionRecord {
    ConnectionRecord {
        node: node.into(),
        conn: id.into(),
        project: "p".into(),
        actor: actor.into(),
        client_id: String::new(),
        connected_at_ms: at,
        subscriptions: 0,
        protocol: "ws".into(),
    }
}

/// Contract 5: nodes' connections are listed oldest first, changes apply, silent and
/// forgotten nodes drop out.
pub async fn connections_are_listed_for_live_nodes_only<H: RegistryHarness>(h: H) {
    let (a, b) = (h.open().await, h.open().await);
    let t = 1_000_000;
    within(
        "write",
        a.write_connections("n1", t, true, &[conn("n1", "c1", "alice", 10), conn("n1", "c2", "bob", 30)], &[]),
    )
    .await
    .unwrap();
    within("write", b.write_connections("n2", t, true, &[conn("n2", "c1", "alice", 20)], &[])).await.unwrap();
    let ids = |v: Vec<ConnectionRecord>| v.into_iter().map(|c| format!("{}/{}", c.node, c.conn)).collect::<Vec<_>>();
    let all = within("list", a.list_connections("p", None, t, 100)).await.unwrap();
    assert_eq!(ids(all), ["n1/c1", "n2/c1", "n1/c2"]);
    let alice = within("list", b.list_connections("p", Some("alice"), t, 100)).await.unwrap();
    assert_eq!(ids(alice), ["n1/c1", "n2/c1"]);
    assert_eq!(ids(within("list", a.list_connections("p", None, t, 1)).await.unwrap()), ["n1/c1"]);
    assert!(within("list", a.list_connections("q", None, 0, 100)).await.unwrap().is_empty());

    let mut busier = conn("n1", "c1", "alice", 10);
    busier.subscriptions = 5;
    // Not the column's default: the store keeps what the node wrote (issue 37).
    busier.protocol = "mqtt-ws".into();
    within("write", a.write_connections("n1", t + 1, false, &[busier.clone()], &["c2".into()])).await.unwrap();
    let live = within("list", b.list_connections("p", None, t + 1, 100)).await.unwrap();
    assert_eq!(live, vec![busier], "n2 was last seen before t+1; c2 is gone");
    within("forget", a.forget_node("n1")).await.unwrap();
    assert_eq!(ids(within("list", a.list_connections("p", None, 0, 100)).await.unwrap()), ["n2/c1"]);
    within("write", b.write_connections("n2", t + 2, true, &[], &[])).await.unwrap();
    assert!(within("list", a.list_connections("p", None, 0, 100)).await.unwrap().is_empty(), "a full write replaces");
}
