//! What REST bodies ask is done or refused, never silently dropped (issue 31, items 2 to 4):
//! rooms refuse `topics`, `isEnabled: false` and `config.isPrivate` they cannot honour, on
//! `POST`, `ensure` and `PATCH` alike; `description`, `externalId`, `metadata` (apps, rooms,
//! actors) and a grant's `role` and `metadata` are stored, returned and changed by `PATCH`; and
//! every refusal names the field as the REST body spells it.

use serde_json::{Value, json};

use super::{Reply, builder, call};

/// Every word of `message` outside quotes that looks like a snake_case identifier.
fn snake_words(message: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut quoted = false;
    let mut word = String::new();
    for c in message.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            quoted = !quoted;
            word.clear();
        } else if !quoted && (c.is_ascii_alphanumeric() || c == '_') {
            word.push(c);
        } else {
            if word.contains('_') && word.chars().any(|c| c.is_ascii_lowercase()) {
                out.push(std::mem::take(&mut word));
            }
            word.clear();
        }
    }
    out
}

/// Asserts an error reply with `status` whose message mentions `field` and names no internal
/// snake_case field.
fn refused(r: &Reply, status: u16, field: &str) {
    r.error(status, field);
    let m = r.body["message"].as_str().unwrap_or_default();
    let snake = snake_words(m);
    assert!(snake.is_empty(), "message {m:?} names internal fields {snake:?}");
}

#[tokio::test]
async fn rooms_refuse_topics_disabling_and_privacy_they_cannot_honour_on_post_ensure_and_patch() {
    let s = builder().spawn().await;
    let a = s.addr;
    let body = json!({"name": "Rooms", "topics": ["a", "b"], "config": {"autoProvisionRooms": true}});
    call(a, "POST", "/v1/apps", Some(body)).await.ok(201);
    let cases = [
        (json!({"name": "r1", "topics": ["a"]}), "topics"),
        (json!({"name": "r1", "topics": ["a", "b", "c"]}), "topics"),
        (json!({"name": "r1", "isEnabled": false}), "isEnabled"),
        (json!({"name": "r1", "config": {"isPrivate": true}}), "config.isPrivate"),
    ];
    for path in ["/v1/apps/rooms/rooms", "/v1/apps/rooms/rooms/ensure"] {
        for (body, field) in &cases {
            refused(&call(a, "POST", path, Some(body.clone())).await, 400, field);
            // Nothing was created.
            call(a, "GET", "/v1/apps/rooms/rooms/r1", None).await.error(404, "not found");
        }
    }
    // What a room is anyway is accepted: the app's topics (in any order), enabled, public.
    let same = json!({"name": "r2", "topics": ["b", "a"], "isEnabled": true, "config": {"isPrivate": false}});
    let r = call(a, "POST", "/v1/apps/rooms/rooms", Some(same.clone())).await.ok(201);
    assert_eq!(
        (&r["topics"], &r["isEnabled"], &r["config"]["isPrivate"]),
        (&json!(["a", "b"]), &json!(true), &json!(false))
    );
    let e = call(a, "POST", "/v1/apps/rooms/rooms/ensure", Some(json!({"name": "r3", "topics": ["a", "b"]}))).await;
    assert_eq!(e.ok(200)["roomId"], "r3");
    // PATCH answers the same.
    let patch = |body: Value| call(a, "PATCH", "/v1/apps/rooms/rooms/r2", Some(body));
    refused(&patch(json!({"topics": ["a"]})).await, 400, "topics");
    refused(&patch(json!({"isEnabled": false})).await, 400, "isEnabled");
    refused(&patch(json!({"config": {"isPrivate": true}})).await, 400, "config.isPrivate");
    let kept = patch(json!({"topics": ["a", "b"], "isEnabled": true, "config": {"isPrivate": false}})).await.ok(200);
    assert_eq!(kept["topics"], json!(["a", "b"]));
    // A room with a grant is private: then isPrivate true is what it is, false is refused.
    let g = json!({"permission": "subscribe", "actorType": "user"});
    call(a, "POST", "/v1/apps/rooms/rooms/r2/actors", Some(g)).await.ok(201);
    assert_eq!(patch(json!({"config": {"isPrivate": true}})).await.ok(200)["config"]["isPrivate"], json!(true));
    refused(&patch(json!({"config": {"isPrivate": false}})).await, 400, "config.isPrivate");
    // ensure of an existing room compares with what that room is.
    let ensure = |private: bool| {
        call(a, "POST", "/v1/apps/rooms/rooms/ensure", Some(json!({"name": "r2", "config": {"isPrivate": private}})))
    };
    assert_eq!(ensure(true).await.ok(200)["config"]["isPrivate"], json!(true));
    refused(&ensure(false).await, 400, "config.isPrivate");
}

#[tokio::test]
async fn descriptions_metadata_external_ids_and_roles_are_stored_returned_and_patched() {
    let s = builder().spawn().await;
    let a = s.addr;
    let notes = json!({"description": "the app", "externalId": "ext-1", "metadata": {"plan": "pro", "n": 1}});
    let mut app = json!({"name": "Noted", "topics": ["t"]});
    app.as_object_mut().unwrap().extend(notes.as_object().unwrap().clone());
    let made = call(a, "POST", "/v1/apps", Some(app)).await.ok(201);
    let has = |v: &Value, want: &Value| {
        for (k, w) in want.as_object().unwrap() {
            assert_eq!(&v[k], w, "{k} of {v}");
        }
    };
    has(&made, &notes);
    has(&call(a, "GET", "/v1/apps/noted", None).await.ok(200), &notes);
    let patched =
        call(a, "PATCH", "/v1/apps/noted", Some(json!({"description": "new", "metadata": null}))).await.ok(200);
    has(&patched, &json!({"description": "new", "externalId": "ext-1", "metadata": null}));
    has(&call(a, "GET", "/v1/apps?search=noted", None).await.ok(200)["data"][0], &json!({"description": "new"}));

    let room = json!({"name": "R", "description": "a room", "externalId": "room-9", "metadata": {"floor": 3}});
    let r = call(a, "POST", "/v1/apps/noted/rooms", Some(room)).await.ok(201);
    has(&r, &json!({"description": "a room", "externalId": "room-9", "metadata": {"floor": 3}}));
    let r = call(a, "PATCH", "/v1/apps/noted/rooms/r", Some(json!({"externalId": null, "metadata": {"floor": 4}})))
        .await
        .ok(200);
    has(&r, &json!({"description": "a room", "externalId": null, "metadata": {"floor": 4}}));
    has(&call(a, "GET", "/v1/apps/noted/rooms", None).await.ok(200)[0], &json!({"metadata": {"floor": 4}}));

    let actor = json!({"name": "D", "actorType": "device", "description": "sensor", "externalId": "u-42", "metadata": {"k": "v"}});
    let made = call(a, "POST", "/v1/actors", Some(actor)).await.ok(201);
    has(&made, &json!({"description": "sensor", "externalId": "u-42", "metadata": {"k": "v"}}));
    let id = made["actorTokenId"].as_str().unwrap().to_owned();
    let p = call(a, "PATCH", &format!("/v1/actors/{id}"), Some(json!({"externalId": "u-43"}))).await.ok(200);
    has(&p, &json!({"description": "sensor", "externalId": "u-43", "metadata": {"k": "v"}}));
    has(&call(a, "GET", &format!("/v1/actors/{id}"), None).await.ok(200), &json!({"externalId": "u-43"}));

    let grant = json!({"permission": "pubSub", "actorTokenId": id, "role": "moderator", "metadata": {"seat": 2}});
    let g = call(a, "POST", "/v1/apps/noted/rooms/r/actors", Some(grant)).await.ok(201);
    has(&g, &json!({"role": "moderator", "metadata": {"seat": 2}}));
    has(&call(a, "GET", "/v1/apps/noted/rooms/r/actors", None).await.ok(200)[0], &json!({"role": "moderator"}));

    // Bounded, and refused by the field's REST name; nothing changes.
    let long = |n: usize| "x".repeat(n);
    let bad = [
        (json!({"description": long(1025)}), "description"),
        (json!({"externalId": long(257)}), "externalId"),
        (json!({"metadata": {"big": long(16 * 1024)}}), "metadata"),
        (json!({"metadata": [1, 2]}), "metadata"),
        (json!({"description": 5}), "description"),
    ];
    for (body, field) in bad {
        refused(&call(a, "PATCH", &format!("/v1/actors/{id}"), Some(body.clone())).await, 400, field);
        refused(&call(a, "PATCH", "/v1/apps/noted", Some(body.clone())).await, 400, field);
        refused(&call(a, "PATCH", "/v1/apps/noted/rooms/r", Some(body)).await, 400, field);
    }
    let g = json!({"permission": "pubSub", "actorType": "user", "role": long(65)});
    refused(&call(a, "POST", "/v1/apps/noted/rooms/r/actors", Some(g)).await, 400, "role");
    has(&call(a, "GET", &format!("/v1/actors/{id}"), None).await.ok(200), &json!({"description": "sensor"}));
    // Exactly at the bounds is fine.
    let edge = json!({"description": long(1024), "externalId": long(256)});
    call(a, "PATCH", &format!("/v1/actors/{id}"), Some(edge)).await.ok(200);
}

#[tokio::test]
async fn refusals_name_the_field_as_the_rest_body_spells_it() {
    let s = builder().spawn().await;
    let a = s.addr;
    refused(&call(a, "POST", "/v1/actors", Some(json!({"name": "x"}))).await, 400, "actorType is required");
    refused(&call(a, "POST", "/v1/actors", Some(json!({"actorType": "robot"}))).await, 400, "actorType");
    let grants = "/v1/apps/demo/rooms/general/actors";
    let g = |extra: Value| {
        let mut b = json!({"permission": "subscribe"});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        call(a, "POST", grants, Some(b))
    };
    refused(&g(json!({})).await, 400, "give exactly one of actorTokenId and actorType");
    refused(&g(json!({"actorTokenId": "alice", "actorType": "user"})).await, 400, "actorTokenId");
    refused(&g(json!({"actorTokenId": "no such one!"})).await, 400, "actorTokenId");
    refused(&g(json!({"actorType": "robot"})).await, 400, "actorType");
    refused(&g(json!({"actorType": "user", "expiresAt": "2001-01-01T00:00:00Z"})).await, 400, "expiresAt");
    let app = json!({"name": "Bad", "topics": ["ok", "not ok"]});
    refused(&call(a, "POST", "/v1/apps", Some(app)).await, 400, "topics[1]");
    let app = json!({"name": "Twice", "topics": ["ok", "ok"]});
    refused(&call(a, "POST", "/v1/apps", Some(app)).await, 400, "topics");
    // The demo app does not auto-provision rooms.
    refused(
        &call(a, "POST", "/v1/apps/demo/rooms/ensure", Some(json!({"name": "new"}))).await,
        403,
        "config.autoProvisionRooms",
    );
    let hist = json!({"name": "H", "topics": ["t"], "topicConfigs": {"t": {"history": {"size": 0, "ttl": 5}}}});
    refused(&call(a, "POST", "/v1/apps", Some(hist)).await, 400, "topicConfigs.t.history");
}
