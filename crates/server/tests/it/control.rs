//! The control plane's gRPC API (`skua.control.v1`) against an in-process node: every RPC, and
//! every error status it documents.

use rmpv::Value;
use skua_control::pb;
use skua_testkit::control::{self, Control};
use skua_testkit::{TEST_ADMIN_KEY, TestServer, frame};
use tonic::{Code, Response, Status};

async fn server() -> (TestServer, Control) {
    let s = TestServer::builder().grpc().spawn().await;
    let c = s.control().await;
    (s, c)
}

/// The status code of a failed call, with its message for context.
fn fails<T: std::fmt::Debug>(r: Result<Response<T>, Status>) -> (Code, String) {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(s) => (s.code(), s.message().to_owned()),
    }
}

fn ok<T>(r: Result<Response<T>, Status>) -> T {
    r.unwrap_or_else(|s| panic!("{:?}: {}", s.code(), s.message())).into_inner()
}

fn project_req(id: &str) -> pb::CreateProjectRequest {
    pb::CreateProjectRequest { id: id.into(), ..Default::default() }
}

fn app_req(project: &str, slug: &str, topics: &[&str]) -> pb::CreateAppRequest {
    pb::CreateAppRequest {
        project_id: project.into(),
        slug: slug.into(),
        topics: topics.iter().map(|t| pb::Topic { name: (*t).into(), ..Default::default() }).collect(),
        ..Default::default()
    }
}

fn room_req(app: &str, slug: &str) -> pb::CreateRoomRequest {
    pb::CreateRoomRequest { app: app.into(), slug: slug.into(), ..Default::default() }
}

fn actor_ref(id: &str) -> pb::ActorRef {
    pb::ActorRef { actor_id: id.into() }
}

/// The services reflection lists, asked with `key` (if any).
async fn reflected_services(addr: std::net::SocketAddr, key: Option<&str>) -> Result<Vec<String>, Status> {
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let bearer: Option<tonic::metadata::MetadataValue<_>> = key.map(|k| format!("Bearer {k}").parse().unwrap());
    let mut reflection = tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::with_interceptor(
        channel,
        move |mut req: tonic::Request<()>| {
            if let Some(v) = &bearer {
                req.metadata_mut().insert("authorization", v.clone());
            }
            Ok(req)
        },
    );
    let ask = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut replies = reflection.server_reflection_info(futures_util::stream::iter(vec![ask])).await?.into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) = replies.message().await?.unwrap().message_response else {
        panic!("not a service list");
    };
    Ok(list.service.into_iter().map(|s| s.name).collect())
}

#[tokio::test]
async fn calls_without_the_admin_key_are_unauthenticated_health_is_open_and_reflection_needs_the_key() {
    let (s, _) = server().await;
    let addr = s.grpc_addr.unwrap();
    let mut anonymous = control::connect(addr, None).await;
    let (code, msg) = fails(anonymous.list_projects(pb::ListProjectsRequest {}).await);
    assert_eq!(code, Code::Unauthenticated);
    assert!(msg.contains("missing admin API key"), "{msg}");
    let mut wrong = control::connect(addr, Some("not-the-key-at-all")).await;
    assert_eq!(fails(wrong.list_projects(pb::ListProjectsRequest {}).await).0, Code::Unauthenticated);
    let mut right = control::connect(addr, Some(TEST_ADMIN_KEY)).await;
    assert_eq!(ok(right.list_projects(pb::ListProjectsRequest {}).await).projects.len(), 1);

    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let r = health
        .check(tonic_health::pb::HealthCheckRequest { service: "skua.control.v1.Control".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);

    let refused = reflected_services(addr, None).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "reflection is behind the admin key by default");
    let names = reflected_services(addr, Some(TEST_ADMIN_KEY)).await.unwrap();
    for want in ["skua.control.v1.Control", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
}

#[tokio::test]
async fn reflection_is_open_with_grpc_reflection_public() {
    let s = TestServer::builder().grpc().settings(|s| s.control.grpc_reflection_public = Some(true)).spawn().await;
    let names = reflected_services(s.grpc_addr.unwrap(), None).await.unwrap();
    assert!(names.iter().any(|n| n == "skua.control.v1.Control"), "{names:?}");
}

#[tokio::test]
async fn failed_admin_keys_back_off_the_address_even_for_the_right_key() {
    let s = TestServer::builder()
        .grpc()
        .settings(|s| {
            s.control.admin_key_max_failures = Some(3);
            s.control.admin_key_backoff_max = Some("1m".into());
        })
        .spawn()
        .await;
    let addr = s.grpc_addr.unwrap();
    let mut wrong = control::connect(addr, Some("not-the-key-at-all")).await;
    for _ in 0..3 {
        assert_eq!(fails(wrong.list_projects(pb::ListProjectsRequest {}).await).0, Code::Unauthenticated);
    }
    // Blocked now: further wrong keys lengthen the block (1 s, 2 s, 4 s, 8 s).
    for _ in 0..3 {
        assert_eq!(fails(wrong.list_projects(pb::ListProjectsRequest {}).await).0, Code::ResourceExhausted);
    }
    let mut right = control::connect(addr, Some(TEST_ADMIN_KEY)).await;
    let (code, msg) = fails(right.list_projects(pb::ListProjectsRequest {}).await);
    assert_eq!(code, Code::ResourceExhausted);
    assert!(msg.starts_with("too many failed admin-key attempts; retry in "), "{msg}");
    // Health needs no key and is never throttled (probes come from the same addresses).
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    assert!(health.check(tonic_health::pb::HealthCheckRequest { service: String::new() }).await.is_ok());
}

#[tokio::test]
async fn projects_create_get_list_update_delete() {
    let (_s, mut c) = server().await;
    let limits =
        pb::ProjectLimits { max_connections: Some(10), monthly_message_quota: Some(1000), ..Default::default() };
    let p = ok(c
        .create_project(pb::CreateProjectRequest {
            id: "acme".into(),
            name: "Acme".into(),
            jwt_secret: "acme-secret".into(),
            limits: Some(limits),
        })
        .await);
    assert_eq!((p.id.as_str(), p.name.as_str(), p.has_jwt_secret), ("acme", "Acme", true));
    assert_eq!(p.limits.unwrap().max_connections, Some(10));
    assert_eq!(fails(c.create_project(project_req("acme")).await).0, Code::AlreadyExists);
    let (code, msg) = fails(c.create_project(project_req("no spaces")).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.starts_with("id \"no spaces\" is invalid"), "{msg}");
    assert_eq!(fails(c.create_project(project_req("")).await), (Code::InvalidArgument, "id is required".into()));
    let bad = pb::ProjectLimits { max_message_size: Some(2_000_000), ..Default::default() };
    let r = c.create_project(pb::CreateProjectRequest { limits: Some(bad), ..project_req("big") }).await;
    assert_eq!(fails(r).0, Code::InvalidArgument);

    let got = ok(c.get_project(pb::GetProjectRequest { project_id: "acme".into() }).await);
    assert_eq!(got.limits.unwrap().monthly_message_quota, Some(1000));
    assert_eq!(fails(c.get_project(pb::GetProjectRequest { project_id: "nope".into() }).await).0, Code::NotFound);
    assert_eq!(fails(c.get_project(pb::GetProjectRequest::default()).await).0, Code::InvalidArgument);
    let ids: Vec<String> =
        ok(c.list_projects(pb::ListProjectsRequest {}).await).projects.into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["acme", "demo-project"]);

    let up = ok(c
        .update_project(pb::UpdateProjectRequest {
            project_id: "acme".into(),
            name: Some("Acme Inc".into()),
            jwt_secret: Some(String::new()),
            limits: Some(pb::ProjectLimits { rate_limit: Some(5), ..Default::default() }),
        })
        .await);
    assert_eq!((up.name.as_str(), up.has_jwt_secret), ("Acme Inc", false));
    assert_eq!(up.limits.unwrap(), pb::ProjectLimits { rate_limit: Some(5), ..Default::default() });
    let r = c.update_project(pb::UpdateProjectRequest { project_id: "nope".into(), ..Default::default() }).await;
    assert_eq!(fails(r).0, Code::NotFound);

    ok(c.create_app(app_req("acme", "chat", &["messages"])).await);
    let r = c.delete_project(pb::DeleteProjectRequest { project_id: "acme".into(), force: false }).await;
    let (code, msg) = fails(r);
    assert_eq!(code, Code::FailedPrecondition);
    assert!(msg.contains("still has 1 apps"), "{msg}");
    let d = ok(c.delete_project(pb::DeleteProjectRequest { project_id: "acme".into(), force: true }).await);
    assert_eq!(d.deleted, 2, "the project and its app");
    let r = c.delete_project(pb::DeleteProjectRequest { project_id: "acme".into(), force: true }).await;
    assert_eq!(fails(r).0, Code::NotFound);
}

#[tokio::test]
async fn apps_create_get_list_update_delete() {
    let (_s, mut c) = server().await;
    let mut req = app_req("", "chat", &["messages", "typing"]);
    req.topics[0].logged = true;
    req.topics[1].webhook =
        Some(pb::Webhook { url: "https://example.com/hook".into(), events: vec!["message".into()] });
    let a = ok(c.create_app(req).await);
    assert_eq!((a.id.as_str(), a.project_id.as_str(), a.slug.as_str()), ("demo-project-chat", "demo-project", "chat"));
    assert!(a.topics[0].logged);
    assert_eq!(a.topics[1].webhook.as_ref().unwrap().url, "https://example.com/hook");
    assert_eq!(fails(c.create_app(app_req("", "chat", &[])).await).0, Code::AlreadyExists);
    let (code, msg) = fails(c.create_app(app_req("", "x", &["t", "t"])).await);
    assert_eq!((code, msg.as_str()), (Code::InvalidArgument, "topics lists \"t\" twice"));
    let mut bad_hook = app_req("", "y", &["t"]);
    bad_hook.topics[0].webhook = Some(pb::Webhook { url: "ftp://x".into(), events: vec![] });
    assert_eq!(fails(c.create_app(bad_hook).await).0, Code::InvalidArgument);
    assert_eq!(fails(c.create_app(app_req("ghost", "z", &[])).await).0, Code::NotFound);

    let by_slug = ok(c.get_app(pb::GetAppRequest { project_id: String::new(), app: "chat".into() }).await);
    let by_id = ok(c.get_app(pb::GetAppRequest { project_id: String::new(), app: "demo-project-chat".into() }).await);
    assert_eq!(by_slug, by_id);
    assert_eq!(
        fails(c.get_app(pb::GetAppRequest { project_id: String::new(), app: "nope".into() }).await).0,
        Code::NotFound
    );
    let slugs: Vec<String> =
        ok(c.list_apps(pb::ListAppsRequest::default()).await).apps.into_iter().map(|a| a.slug).collect();
    assert_eq!(slugs, ["demo", "chat"], "by creation");

    let up = ok(c
        .update_app(pb::UpdateAppRequest {
            app: "chat".into(),
            name: Some("Chat".into()),
            topics: Some(pb::TopicList { topics: vec![pb::Topic { name: "only".into(), ..Default::default() }] }),
            auto_provision_rooms: Some(true),
            max_rooms: Some(3),
            ..Default::default()
        })
        .await);
    assert_eq!((up.name.as_str(), up.topics.len(), up.auto_provision_rooms, up.max_rooms), ("Chat", 1, true, 3));
    let r = c.update_app(pb::UpdateAppRequest { app: "nope".into(), ..Default::default() }).await;
    assert_eq!(fails(r).0, Code::NotFound);

    ok(c.create_room(room_req("chat", "r1")).await);
    let d = ok(c.delete_app(pb::DeleteAppRequest { project_id: String::new(), app: "chat".into() }).await);
    assert_eq!(d.deleted, 2, "the app and its room");
    assert_eq!(
        fails(c.delete_app(pb::DeleteAppRequest { project_id: String::new(), app: "chat".into() }).await).0,
        Code::NotFound
    );

    // With two projects, the project can no longer be left out.
    ok(c.create_project(project_req("other")).await);
    let (code, msg) = fails(c.list_apps(pb::ListAppsRequest::default()).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("project_id is required"), "{msg}");
}

#[tokio::test]
async fn rooms_create_get_list_pages_update_delete() {
    let (_s, mut c) = server().await;
    for slug in ["r1", "r2", "r3", "r4", "r5"] {
        let r = ok(c.create_room(room_req("demo", slug)).await);
        assert_eq!((r.app_slug.as_str(), r.dynamic, r.private), ("demo", false, false));
    }
    assert_eq!(fails(c.create_room(room_req("demo", "r1")).await).0, Code::AlreadyExists);
    assert_eq!(fails(c.create_room(room_req("demo", "bad/slug")).await).0, Code::InvalidArgument);
    assert_eq!(fails(c.create_room(room_req("nope", "r9")).await).0, Code::NotFound);

    let ops = ok(c.get_room(pb::GetRoomRequest { app: "demo".into(), slug: "ops".into(), ..Default::default() }).await);
    assert!(ops.private, "ops has a grant");
    let r = c.get_room(pb::GetRoomRequest { app: "demo".into(), slug: "nope".into(), ..Default::default() }).await;
    assert_eq!(fails(r).0, Code::NotFound);

    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = ok(c
            .list_rooms(pb::ListRoomsRequest {
                app: "demo".into(),
                page_size: 3,
                page_token: token,
                ..Default::default()
            })
            .await);
        assert!(page.rooms.len() <= 3);
        seen.extend(page.rooms.into_iter().map(|r| r.slug));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, ["general", "ops", "r1", "r2", "r3", "r4", "r5", "random"]);
    let r =
        c.list_rooms(pb::ListRoomsRequest { app: "demo".into(), page_token: "a b".into(), ..Default::default() }).await;
    assert_eq!(fails(r).0, Code::InvalidArgument);

    let up = ok(c
        .update_room(pb::UpdateRoomRequest {
            app: "demo".into(),
            slug: "r1".into(),
            name: Some("Room one".into()),
            ..Default::default()
        })
        .await);
    assert_eq!(up.name, "Room one");
    let r = c.update_room(pb::UpdateRoomRequest { app: "demo".into(), slug: "zz".into(), ..Default::default() }).await;
    assert_eq!(fails(r).0, Code::NotFound);

    let d =
        ok(c.delete_room(pb::DeleteRoomRequest { app: "demo".into(), slug: "ops".into(), ..Default::default() }).await);
    assert_eq!(d.deleted, 2, "the room and its grant");
    let r = c.delete_room(pb::DeleteRoomRequest { app: "demo".into(), slug: "ops".into(), ..Default::default() }).await;
    assert_eq!(fails(r).0, Code::NotFound);
    // A lobby covering a deleted room loses it.
    let d = ok(c
        .delete_room(pb::DeleteRoomRequest { app: "demo".into(), slug: "random".into(), ..Default::default() })
        .await);
    assert_eq!(d.deleted, 1);
    let l = ok(c.get_lobby(pb::GetLobbyRequest { project_id: String::new(), slug: "online".into() }).await);
    assert_eq!(l.rooms, ["general"]);
}

#[tokio::test]
async fn ensure_room_is_idempotent_needs_auto_provisioning_and_respects_the_cap() {
    let (_s, mut c) = server().await;
    let ensure = |slug: &str| pb::EnsureRoomRequest { app: "demo".into(), slug: slug.into(), ..Default::default() };
    let (code, msg) = fails(c.ensure_room(ensure("lobby-7")).await);
    assert_eq!(code, Code::FailedPrecondition);
    assert!(msg.contains("auto-provisioning"), "{msg}");
    ok(c.update_app(pb::UpdateAppRequest {
        app: "demo".into(),
        auto_provision_rooms: Some(true),
        max_rooms: Some(4),
        ..Default::default()
    })
    .await);
    let first = ok(c.ensure_room(ensure("lobby-7")).await);
    assert!(first.created);
    assert!(first.room.as_ref().unwrap().dynamic);
    let again = ok(c.ensure_room(ensure("lobby-7")).await);
    assert!(!again.created);
    assert_eq!(again.room, first.room);
    // An existing static room is returned as is.
    assert!(!ok(c.ensure_room(ensure("general")).await).created);
    // general, random, ops, lobby-7: at the cap of 4.
    let (code, msg) = fails(c.ensure_room(ensure("lobby-8")).await);
    assert_eq!(code, Code::FailedPrecondition);
    assert!(msg.contains("most allowed (4)"), "{msg}");
    assert_eq!(fails(c.create_room(room_req("demo", "lobby-8")).await).0, Code::FailedPrecondition);
    assert_eq!(fails(c.ensure_room(ensure("")).await).0, Code::InvalidArgument);
}

#[tokio::test]
async fn every_cap_refuses_one_more_with_failed_precondition_naming_its_setting() {
    let s = TestServer::builder()
        .grpc()
        .settings(|s| {
            s.control.max_apps_per_project = Some(1);
            s.control.max_actors_per_project = Some(1);
            s.control.max_grants_per_room = Some(1);
            s.control.max_lobbies_per_project = Some(1);
        })
        .spawn()
        .await;
    let mut c = s.control().await;
    ok(c.create_project(project_req("capped")).await);
    let refused = |(code, msg): (Code, String), want: &str| {
        assert_eq!((code, msg.as_str()), (Code::FailedPrecondition, want));
    };

    ok(c.create_app(app_req("capped", "one", &["t"])).await);
    refused(
        fails(c.create_app(app_req("capped", "two", &[])).await),
        "project \"capped\" has 1 apps, the most allowed (max_apps_per_project)",
    );

    let actor = |id: &str| pb::CreateActorRequest {
        project_id: "capped".into(),
        id: id.into(),
        actor_type: "user".into(),
        ..Default::default()
    };
    ok(c.create_actor(actor("a1")).await);
    refused(
        fails(c.create_actor(actor("a2")).await),
        "project \"capped\" has 1 actors, the most allowed (max_actors_per_project)",
    );

    let room = pb::CreateRoomRequest { project_id: "capped".into(), ..room_req("one", "r") };
    ok(c.create_room(room).await);
    let grant = |ty: &str| pb::CreateGrantRequest {
        project_id: "capped".into(),
        app: "one".into(),
        room: "r".into(),
        actor_type: ty.into(),
        permission: "subscribe".into(),
        ..Default::default()
    };
    ok(c.create_grant(grant("user")).await);
    refused(
        fails(c.create_grant(grant("agent")).await),
        "room \"r\" has 1 grants, the most allowed (max_grants_per_room)",
    );

    let lobby = |slug: &str| pb::CreateLobbyRequest {
        project_id: "capped".into(),
        app: "one".into(),
        slug: slug.into(),
        ..Default::default()
    };
    ok(c.create_lobby(lobby("l1")).await);
    refused(
        fails(c.create_lobby(lobby("l2")).await),
        "project \"capped\" has 1 lobbies, the most allowed (max_lobbies_per_project)",
    );
}

#[tokio::test]
async fn actors_get_a_token_once_that_authenticates_and_only_its_hash_is_stored() {
    let (s, mut c) = server().await;
    let created = ok(c
        .create_actor(pb::CreateActorRequest {
            id: "worker-3".into(),
            actor_type: "agent".into(),
            ..Default::default()
        })
        .await);
    let token = created.access_token.clone();
    assert!(token.starts_with(&format!("at_live_{}.", created.token_key_id)), "{token}");
    let actor = created.actor.unwrap();
    assert_eq!((actor.id.as_str(), actor.actor_type.as_str(), actor.active), ("worker-3", "agent", true));
    assert_eq!(actor.token_key_ids, std::slice::from_ref(&created.token_key_id));
    let mut ws = s.connect().await;
    let reply = ws.auth_ok(&token, 2).await;
    assert_eq!(reply.str("actorTokenId"), "worker-3");

    // The store holds the token's SHA-256, never the token or its secret.
    let snapshot = s.registry_store().load().await.unwrap();
    let stored: Vec<String> = snapshot.data.objects().iter().map(|o| o.spec_json().unwrap()).collect();
    let secret = token.split('.').nth(1).unwrap();
    assert!(!stored.iter().any(|spec| spec.contains(secret)), "{stored:?}");
    let digest = skua_core::registry_store::hex(&skua_core::registry::digest(&token));
    assert!(stored.iter().any(|spec| spec.contains(&digest)));

    let generated =
        ok(c.create_actor(pb::CreateActorRequest { actor_type: "user".into(), ..Default::default() }).await);
    assert!(generated.actor.unwrap().id.starts_with("actor-"));
    let dup = pb::CreateActorRequest { id: "worker-3".into(), actor_type: "agent".into(), ..Default::default() };
    assert_eq!(fails(c.create_actor(dup).await).0, Code::AlreadyExists);
    let bad = pb::CreateActorRequest { id: "x".into(), actor_type: "robot".into(), ..Default::default() };
    let (code, msg) = fails(c.create_actor(bad).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("actor_type \"robot\" is invalid"), "{msg}");
    let missing = pb::CreateActorRequest { id: "x".into(), ..Default::default() };
    assert_eq!(fails(c.create_actor(missing).await), (Code::InvalidArgument, "actor_type is required".into()));
    assert_eq!(fails(c.get_actor(pb::GetActorRequest { actor_id: "nope".into() }).await).0, Code::NotFound);

    let page = ok(c.list_actors(pb::ListActorsRequest { page_size: 3, ..Default::default() }).await);
    assert_eq!(page.actors.len(), 3);
    let rest = ok(c
        .list_actors(pb::ListActorsRequest { page_size: 100, page_token: page.next_page_token, ..Default::default() })
        .await);
    assert_eq!(page.actors.len() + rest.actors.len(), 8, "six demo actors, worker-3 and the generated one");
    assert!(rest.next_page_token.is_empty());
}

#[tokio::test]
async fn actors_deactivate_activate_rotate_delete() {
    let (s, mut c) = server().await;
    let created = ok(c
        .create_actor(pb::CreateActorRequest { id: "w".into(), actor_type: "agent".into(), ..Default::default() })
        .await);
    let old = created.access_token;
    assert!(!ok(c.deactivate_actor(actor_ref("w")).await).active);
    let mut ws = s.connect().await;
    assert_eq!(ws.auth(&old, Some(2)).await.str("error"), "access_denied");
    assert!(ok(c.activate_actor(actor_ref("w")).await).active);
    ws.auth_ok(&old, 2).await;

    let rotated = ok(c.rotate_actor_token(actor_ref("w")).await);
    assert_ne!(rotated.access_token, old);
    assert_eq!(rotated.actor.unwrap().token_key_ids, [rotated.token_key_id]);
    let mut fresh = s.connect().await;
    assert_eq!(fresh.auth(&old, Some(2)).await.str("error"), "access_denied", "the old token is gone");
    fresh.auth_ok(&rotated.access_token, 2).await;

    assert_eq!(fails(c.deactivate_actor(actor_ref("nope")).await).0, Code::NotFound);
    assert_eq!(fails(c.activate_actor(actor_ref("bad id")).await).0, Code::InvalidArgument);
    assert_eq!(fails(c.rotate_actor_token(actor_ref("nope")).await).0, Code::NotFound);
    let d = ok(c.delete_actor(actor_ref("alice")).await);
    assert_eq!(d.deleted, 3, "alice, her token and her grant on ops");
    assert_eq!(fails(c.delete_actor(actor_ref("alice")).await).0, Code::NotFound);
    let mut a = s.connect().await;
    assert_eq!(a.auth("dev-token-alice", Some(2)).await.str("error"), "access_denied");
}

#[tokio::test]
async fn grants_create_list_delete_and_make_rooms_private() {
    let (s, mut c) = server().await;
    ok(c.create_room(room_req("demo", "vip")).await);
    let grant = |actor: &str, ty: &str, perm: &str| pb::CreateGrantRequest {
        app: "demo".into(),
        room: "vip".into(),
        actor_id: actor.into(),
        actor_type: ty.into(),
        permission: perm.into(),
        ..Default::default()
    };
    let g = ok(c.create_grant(grant("bob", "", "subscribe")).await);
    assert_eq!((g.actor_id.as_str(), g.permission.as_str(), g.room.as_str()), ("bob", "subscribe", "vip"));
    let mut t = grant("", "agent", "pubSub");
    t.topics = vec!["tasks".into()];
    t.expires_at = skua_testkit::now_s() + 3600;
    let g2 = ok(c.create_grant(t).await);
    assert_eq!((g2.actor_type.as_str(), g2.topics.as_slice()), ("agent", ["tasks".to_owned()].as_slice()));
    let room =
        ok(c.get_room(pb::GetRoomRequest { app: "demo".into(), slug: "vip".into(), ..Default::default() }).await);
    assert!(room.private);

    let mut bob = s.auth("dev-token-bob").await;
    bob.subscribe("demo/vip/messages").await;
    let mut carol = s.auth("dev-token-carol").await;
    carol.send(frame! {"type" => "subscribe", "topic" => "demo/vip/messages"}).await;
    assert_eq!(carol.expect_error("unknown_topic").await.str("topic"), "demo/vip/messages");

    assert_eq!(fails(c.create_grant(grant("bob", "user", "subscribe")).await).0, Code::InvalidArgument);
    assert_eq!(fails(c.create_grant(grant("", "", "subscribe")).await).0, Code::InvalidArgument);
    assert_eq!(fails(c.create_grant(grant("bob", "", "")).await).0, Code::InvalidArgument);
    let (code, msg) = fails(c.create_grant(grant("bob", "", "write")).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("one of subscribe, publish, pubSub"), "{msg}");
    assert_eq!(fails(c.create_grant(grant("ghost", "", "subscribe")).await).0, Code::NotFound);
    let mut bad_topic = grant("bob", "", "subscribe");
    bad_topic.topics = vec!["nope".into()];
    assert_eq!(fails(c.create_grant(bad_topic).await).0, Code::InvalidArgument);
    let mut past = grant("bob", "", "subscribe");
    past.expires_at = 1;
    assert_eq!(fails(c.create_grant(past).await).0, Code::InvalidArgument);
    let mut no_room = grant("bob", "", "subscribe");
    no_room.room = "nope".into();
    assert_eq!(fails(c.create_grant(no_room).await).0, Code::NotFound);

    let list =
        ok(c.list_grants(pb::ListGrantsRequest { app: "demo".into(), room: "vip".into(), ..Default::default() }).await);
    assert_eq!(list.grants.iter().map(|g| g.id.clone()).collect::<Vec<_>>(), [g.id.clone(), g2.id.clone()]);
    let r =
        c.list_grants(pb::ListGrantsRequest { app: "demo".into(), room: "nope".into(), ..Default::default() }).await;
    assert_eq!(fails(r).0, Code::NotFound);
    assert_eq!(ok(c.delete_grant(pb::DeleteGrantRequest { grant_id: g.id.clone() }).await).deleted, 1);
    assert_eq!(fails(c.delete_grant(pb::DeleteGrantRequest { grant_id: g.id }).await).0, Code::NotFound);
    assert_eq!(fails(c.delete_grant(pb::DeleteGrantRequest::default()).await).0, Code::InvalidArgument);
}

#[tokio::test]
async fn lobbies_create_get_list_set_rooms_delete() {
    let (_s, mut c) = server().await;
    let l = ok(c
        .create_lobby(pb::CreateLobbyRequest {
            slug: "staff".into(),
            app: "demo".into(),
            rooms: vec!["ops".into()],
            allowed_actors: vec!["alice".into()],
            allowed_actor_types: vec!["observer".into()],
            ..Default::default()
        })
        .await);
    assert_eq!((l.app_id.as_str(), l.rooms.as_slice()), ("demo-app", ["ops".to_owned()].as_slice()));
    let dup = pb::CreateLobbyRequest { slug: "staff".into(), app: "demo".into(), ..Default::default() };
    assert_eq!(fails(c.create_lobby(dup).await).0, Code::AlreadyExists);
    let bad_room = pb::CreateLobbyRequest {
        slug: "x".into(),
        app: "demo".into(),
        rooms: vec!["nope".into()],
        ..Default::default()
    };
    assert_eq!(fails(c.create_lobby(bad_room).await).0, Code::NotFound);
    let twice = pb::CreateLobbyRequest {
        slug: "x".into(),
        app: "demo".into(),
        rooms: vec!["ops".into(), "ops".into()],
        ..Default::default()
    };
    assert_eq!(fails(c.create_lobby(twice).await).0, Code::InvalidArgument);
    let bad_actor = pb::CreateLobbyRequest {
        slug: "x".into(),
        app: "demo".into(),
        allowed_actors: vec!["ghost".into()],
        ..Default::default()
    };
    assert_eq!(fails(c.create_lobby(bad_actor).await).0, Code::NotFound);
    let bad_type = pb::CreateLobbyRequest {
        slug: "x".into(),
        app: "demo".into(),
        allowed_actor_types: vec!["robot".into()],
        ..Default::default()
    };
    assert_eq!(fails(c.create_lobby(bad_type).await).0, Code::InvalidArgument);

    assert_eq!(ok(c.get_lobby(pb::GetLobbyRequest { project_id: String::new(), slug: "staff".into() }).await), l);
    assert_eq!(
        fails(c.get_lobby(pb::GetLobbyRequest { project_id: String::new(), slug: "nope".into() }).await).0,
        Code::NotFound
    );
    let slugs: Vec<String> =
        ok(c.list_lobbies(pb::ListLobbiesRequest::default()).await).lobbies.into_iter().map(|l| l.slug).collect();
    assert_eq!(slugs, ["online", "staff"]);
    let set = ok(c
        .set_lobby_rooms(pb::SetLobbyRoomsRequest {
            slug: "staff".into(),
            rooms: vec!["ops".into(), "general".into()],
            ..Default::default()
        })
        .await);
    assert_eq!(set.rooms, ["ops", "general"]);
    let r = c.set_lobby_rooms(pb::SetLobbyRoomsRequest { slug: "nope".into(), ..Default::default() }).await;
    assert_eq!(fails(r).0, Code::NotFound);
    assert_eq!(
        ok(c.delete_lobby(pb::DeleteLobbyRequest { project_id: String::new(), slug: "staff".into() }).await).deleted,
        1
    );
    let r = c.delete_lobby(pb::DeleteLobbyRequest { project_id: String::new(), slug: "staff".into() }).await;
    assert_eq!(fails(r).0, Code::NotFound);
}

#[tokio::test]
async fn server_side_publish_reaches_subscribers_and_is_validated() {
    let (s, mut c) = server().await;
    let mut bob = s.auth("dev-token-bob").await;
    bob.subscribe("demo/general/messages").await;
    let mut data = Vec::new();
    rmpv::encode::write_value(&mut data, &frame! {"text" => "hello from the backend"}).unwrap();
    let publish = |topic: &str, data: &[u8]| pb::PublishRequest {
        topic: topic.into(),
        data: data.to_vec(),
        ..Default::default()
    };
    let r = ok(c.publish(publish("demo/general/messages", &data)).await);
    let m = bob.expect("message").await;
    assert_eq!(m.str("topic"), "demo/general/messages");
    assert_eq!(m.str("from"), "server");
    assert_eq!(m.get("data"), &frame! {"text" => "hello from the backend"});
    assert_eq!(m.int("timestamp"), i64::try_from(r.timestamp_ms).unwrap());
    let as_alice = pb::PublishRequest {
        from_actor: "alice".into(),
        filter: "vip".into(),
        ..publish("demo/general/messages", &data)
    };
    ok(c.publish(as_alice).await);
    let m = bob.expect("message").await;
    assert_eq!((m.str("from"), m.str("filter")), ("alice", "vip"));

    // A logged topic stores the message first: it arrives with msgId and requiresAck (N24).
    bob.subscribe("demo/general/tasks").await;
    ok(c.publish(publish("demo/general/tasks", &data)).await);
    let m = bob.expect("message").await;
    assert_eq!(m.str("topic"), "demo/general/tasks");
    assert!(!m.str("msgId").is_empty(), "{m:?}");
    assert_eq!(m.get("requiresAck"), &Value::Boolean(true));

    assert_eq!(fails(c.publish(publish("demo/general", &data)).await).0, Code::InvalidArgument);
    assert_eq!(fails(c.publish(publish("demo/nope/messages", &data)).await).0, Code::NotFound);
    assert_eq!(fails(c.publish(publish("demo/general/nope", &data)).await).0, Code::NotFound);
    assert_eq!(fails(c.publish(publish("demo/general/messages", &[0x92, 0x01])).await).0, Code::InvalidArgument);
    assert_eq!(fails(c.publish(publish("demo/general/messages", &[0x01, 0x02])).await).0, Code::InvalidArgument);
    let mut huge = Vec::new();
    rmpv::encode::write_value(&mut huge, &Value::Binary(vec![0; 1_000_000])).unwrap();
    let (code, msg) = fails(c.publish(publish("demo/general/messages", &huge)).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(msg.contains("at most 921600"), "{msg}");
    let bad_filter = pb::PublishRequest { filter: "a/b".into(), ..publish("demo/general/messages", &data) };
    assert_eq!(fails(c.publish(bad_filter).await).0, Code::InvalidArgument);
    let ghost = pb::PublishRequest { from_actor: "ghost".into(), ..publish("demo/general/messages", &data) };
    assert_eq!(fails(c.publish(ghost).await).0, Code::NotFound);
    bob.assert_nothing_pending().await;
}

#[tokio::test]
async fn connections_are_listed_and_an_actor_can_be_disconnected() {
    let (s, mut c) = server().await;
    let mut a1 = s.auth("dev-token-alice").await;
    a1.subscribe("demo/general/messages").await;
    let mut agent = s.connect().await;
    agent
        .send(frame! {"type" => "auth", "token" => "dev-token-agent", "protocolVersion" => 2, "clientId" => "w-1"})
        .await;
    agent.expect("auth").await;
    let _bob = s.auth("dev-token-bob").await;

    let all = ok(c.list_connections(pb::ListConnectionsRequest::default()).await).connections;
    assert_eq!(all.len(), 3);
    let alice: Vec<_> =
        ok(c.list_connections(pb::ListConnectionsRequest { actor_id: "alice".into(), ..Default::default() }).await)
            .connections;
    assert_eq!(alice.len(), 1);
    assert_eq!((alice[0].subscriptions, alice[0].node_id.as_str()), (1, s.state.node.as_str()));
    let agents =
        ok(c.list_connections(pb::ListConnectionsRequest { actor_id: "agent-1".into(), ..Default::default() }).await)
            .connections;
    assert_eq!(agents[0].client_id, "w-1");
    let r = c.list_connections(pb::ListConnectionsRequest { actor_id: "ghost".into(), ..Default::default() }).await;
    assert_eq!(fails(r).0, Code::NotFound);

    let d = ok(c.disconnect_actor(actor_ref("alice")).await);
    assert_eq!(d.closed_on_this_node, 1);
    assert_eq!(a1.expect_close().await, (4001, "token_revoked".into()));
    // The actor may connect again right away.
    let mut again = s.auth("dev-token-alice").await;
    again.assert_nothing_pending().await;
    assert_eq!(fails(c.disconnect_actor(actor_ref("ghost")).await).0, Code::NotFound);
}

/// What a publish observer saw of one publish.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    source: &'static str,
    topic: String,
    from: String,
    filter: Option<String>,
    logged: bool,
    retain: bool,
}

/// Records every accepted publish into a bounded channel (this test sends far fewer).
#[derive(Debug)]
struct Recorder(tokio::sync::mpsc::Sender<Seen>);

impl skua_edge::publish::PublishObserver for Recorder {
    fn accepted(&self, e: &skua_edge::publish::PublishEvent<'_>) {
        let p = e.publication;
        let seen = Seen {
            source: match e.source {
                skua_edge::publish::Source::Connection(_) => "connection",
                skua_edge::publish::Source::Server => "server",
            },
            topic: format!("{}/{}", p.topic.room.room, p.topic.topic),
            from: p.publisher.to_string(),
            filter: p.filter.clone(),
            logged: p.msg_id.is_some(),
            retain: p.retain,
        };
        self.0.try_send(seen).expect("the test's observer channel has room");
    }
}

#[tokio::test]
async fn a_publish_observer_sees_every_accepted_publish_once_from_both_entry_points_and_no_refused_one() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let s = TestServer::builder()
        .grpc()
        .settings(|s| s.edge.max_retained_per_topic = Some(1))
        .publish_observer(std::sync::Arc::new(Recorder(tx)))
        .spawn()
        .await;
    let mut c = s.control().await;
    let mut bob = s.auth("dev-token-bob").await;
    let mut data = Vec::new();
    rmpv::encode::write_value(&mut data, &Value::from(1)).unwrap();
    let grpc = |topic: &str, filter: &str, retain: bool| pb::PublishRequest {
        topic: topic.into(),
        data: data.clone(),
        filter: filter.into(),
        retain,
        ..Default::default()
    };
    let seen = |source, topic: &str, from: &str, filter: Option<&str>, logged, retain| Seen {
        source,
        topic: topic.into(),
        from: from.into(),
        filter: filter.map(Into::into),
        logged,
        retain,
    };

    // Accepted: a client's publish, a server publish, a server publish to a logged topic.
    bob.publish_acked("demo/general/messages", Value::from(1)).await;
    ok(c.publish(grpc("demo/general/messages", "vip", false)).await);
    ok(c.publish(grpc("demo/general/tasks", "", false)).await);
    // Refused by the pipeline: access, filter, size (client); retained cap (both).
    let refused = [
        frame! {"type" => "publish", "topic" => "demo/general/nope", "data" => 1, "msgRef" => "r"},
        frame! {"type" => "publish", "topic" => "demo/general/messages", "data" => 1, "filter" => "a/b", "msgRef" => "r"},
        frame! {"type" => "publish", "topic" => "demo/general/messages", "data" => Value::Binary(vec![0; 930_000]),
        "msgRef" => "r"},
    ];
    for f in refused {
        bob.send(f).await;
        bob.expect("error").await;
    }
    bob.send(frame! {"type" => "publish", "topic" => "demo/general/status", "data" => 1, "filter" => "k1",
    "retain" => true, "msgRef" => "k1"})
        .await;
    bob.expect("published").await;
    let (code, msg) = fails(c.publish(grpc("demo/general/status", "k2", true)).await);
    assert_eq!(code, Code::Unavailable);
    assert!(msg.starts_with("retained_limit_exceeded: "), "{msg}");
    bob.send(frame! {"type" => "publish", "topic" => "demo/general/status", "data" => 1, "filter" => "k2",
    "retain" => true, "msgRef" => "k2"})
        .await;
    bob.expect_error("retained_limit_exceeded").await;
    bob.publish_acked("demo/general/messages", Value::from(2)).await;

    // Each observer call happened before its publish was answered, so the list is complete.
    let mut got = Vec::new();
    while let Ok(e) = rx.try_recv() {
        got.push(e);
    }
    assert_eq!(
        got,
        [
            seen("connection", "general/messages", "bob", None, false, false),
            seen("server", "general/messages", "server", Some("vip"), false, false),
            seen("server", "general/tasks", "server", None, true, false),
            seen("connection", "general/status", "bob", Some("k1"), false, true),
            seen("connection", "general/messages", "bob", None, false, false),
        ]
    );
}

/// Issue 33, item 6: a gRPC request whose body never arrives does not hold its stream: a raw
/// HTTP/2 client sends a unary call's HEADERS (no END_STREAM) and nothing more; within
/// `grpc_request_timeout` the server answers it `CANCELLED` and ends the stream, and the
/// connection still serves a complete call.
#[tokio::test]
async fn a_grpc_request_whose_body_never_arrives_is_ended_within_the_request_timeout() {
    let s = TestServer::builder().grpc().settings(|s| s.control.grpc_request_timeout = Some("1s".into())).spawn().await;
    let tcp = tokio::net::TcpStream::connect(s.grpc_addr.expect("grpc")).await.expect("connect");
    let (mut h2, conn) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    tokio::spawn(conn);
    let request = |path: &str| {
        http::Request::post(format!("http://localhost{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap()
    };
    let started = std::time::Instant::now();
    // The body stream is kept open and never written to.
    let (answer, _body) = h2.send_request(request("/grpc.health.v1.Health/Check"), false).expect("send HEADERS");
    let answer = tokio::time::timeout(std::time::Duration::from_secs(6), answer)
        .await
        .expect("the call was still waiting for its body after 6 s")
        .expect("an answer");
    let took = started.elapsed();
    assert!(took >= std::time::Duration::from_millis(900), "answered before the timeout: {took:?}");
    let status = answer.headers().get("grpc-status").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut body = answer.into_body();
    let trailers =
        tokio::time::timeout(std::time::Duration::from_secs(5), body.trailers()).await.expect("stream ended");
    let status =
        status.or_else(|| trailers.ok().flatten().and_then(|t| t.get("grpc-status")?.to_str().ok().map(str::to_owned)));
    assert_eq!(status.as_deref(), Some("1"), "CANCELLED");
    // The connection is still usable: a complete Check on it is answered SERVING.
    let mut h2 = h2.ready().await.expect("connection still open");
    let (answer, mut send) = h2.send_request(request("/grpc.health.v1.Health/Check"), false).expect("send");
    // An empty HealthCheckRequest: a gRPC frame with no message bytes.
    send.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true).expect("send body");
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), answer).await.expect("answered").expect("ok");
    let mut body = answer.into_body();
    let message = tokio::time::timeout(std::time::Duration::from_secs(5), body.data()).await.expect("a message");
    // HealthCheckResponse { status: SERVING (1) }: field 1, varint 1.
    assert_eq!(&message.expect("data").expect("frame")[..], &[0, 0, 0, 0, 2, 8, 1]);
}
