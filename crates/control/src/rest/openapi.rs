//! The OpenAPI 3.1 document of `/v1/openapi.json`, built from [`super::ROUTES`] (the table the
//! router is wired from, so the two cannot drift) and the schemas below.

use serde_json::{Map, Value, json};

use super::ROUTES;

/// Path parameters of a route path (`{name}` segments).
fn params(path: &str) -> Vec<&str> {
    path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect()
}

fn string() -> Value {
    json!({"type": "string"})
}

fn nullable(t: &str) -> Value {
    json!({"type": [t, "null"]})
}

fn object(required: &[&str], props: &[(&str, Value)]) -> Value {
    let mut p = Map::new();
    for (k, v) in props {
        p.insert((*k).to_owned(), v.clone());
    }
    json!({"type": "object", "required": required, "properties": p})
}

fn array_of(schema: &str) -> Value {
    json!({"type": "array", "items": {"$ref": format!("#/components/schemas/{schema}")}})
}

/// Every schema the routes name.
fn schemas() -> Map<String, Value> {
    let ts = || json!({"type": ["string", "null"], "format": "date-time"});
    let strings = || json!({"type": "array", "items": {"type": "string"}});
    let actor_props = || {
        vec![
            ("actorTokenId", string()),
            ("projectId", string()),
            ("name", string()),
            ("actorType", string()),
            ("description", nullable("string")),
            ("externalId", nullable("string")),
            ("metadata", nullable("object")),
            ("isActive", json!({"type": "boolean"})),
            ("lastConnectedAt", ts()),
            ("accessScopeId", nullable("string")),
            ("createdAt", ts()),
            ("updatedAt", ts()),
        ]
    };
    let mut with_token = actor_props();
    with_token.push(("accessToken", json!({"type": "string", "description": "at_live_…; returned only here"})));
    let app_config = json!({"type": "object", "properties": {
        "autoProvisionRooms": {"type": "boolean"}, "maxRooms": nullable("integer")}});
    let list = [
        (
            "Error",
            object(
                &["statusCode", "message", "error"],
                &[("statusCode", json!({"type": "integer"})), ("message", string()), ("error", string())],
            ),
        ),
        (
            "App",
            object(
                &["appId", "projectId", "name", "slug"],
                &[
                    ("appId", string()),
                    ("projectId", string()),
                    ("name", string()),
                    ("slug", string()),
                    ("description", nullable("string")),
                    ("blueprintId", nullable("string")),
                    ("config", app_config.clone()),
                    ("topics", strings()),
                    ("roomCount", json!({"type": "integer"})),
                    ("createdAt", ts()),
                    ("updatedAt", ts()),
                    ("deletedAt", ts()),
                ],
            ),
        ),
        (
            "AppPage",
            object(
                &["data", "pagination"],
                &[
                    ("data", array_of("App")),
                    (
                        "pagination",
                        object(
                            &["total", "page", "pageCount"],
                            &[
                                ("total", json!({"type": "integer"})),
                                ("page", json!({"type": "integer"})),
                                ("pageCount", json!({"type": "integer"})),
                            ],
                        ),
                    ),
                    ("total", json!({"type": "integer"})),
                    ("page", json!({"type": "integer"})),
                    ("limit", json!({"type": "integer"})),
                    ("totalPages", json!({"type": "integer"})),
                ],
            ),
        ),
        (
            "AppCreate",
            object(
                &["name"],
                &[("name", string()), ("slug", string()), ("config", app_config.clone()), ("topics", strings())],
            ),
        ),
        (
            "AppUpdate",
            object(
                &[],
                &[
                    ("name", string()),
                    ("slug", json!({"type": "string", "description": "must equal the current slug"})),
                    ("config", app_config),
                    ("topics", strings()),
                ],
            ),
        ),
        (
            "Deleted",
            object(&["success"], &[("success", json!({"type": "boolean"})), ("deleted", json!({"type": "integer"}))]),
        ),
        (
            "Room",
            object(
                &["roomId", "appId", "name", "slug", "roomType"],
                &[
                    ("roomId", string()),
                    ("appId", string()),
                    ("name", string()),
                    ("slug", string()),
                    ("description", nullable("string")),
                    ("roomType", json!({"enum": ["static", "dynamic"]})),
                    ("isEnabled", json!({"type": "boolean"})),
                    ("topics", strings()),
                    ("config", object(&[], &[("isPrivate", json!({"type": "boolean"}))])),
                    ("createdAt", ts()),
                    ("updatedAt", ts()),
                ],
            ),
        ),
        ("RoomList", array_of("Room")),
        ("RoomCreate", object(&["name"], &[("name", string()), ("slug", string())])),
        ("RoomUpdate", object(&[], &[("name", string()), ("isEnabled", json!({"const": true}))])),
        (
            "RoomActorAccess",
            object(
                &["roomActorAccessId", "roomId", "permission"],
                &[
                    ("roomActorAccessId", string()),
                    ("roomId", string()),
                    ("appId", string()),
                    ("actorTokenId", nullable("string")),
                    ("actorType", nullable("string")),
                    ("permission", json!({"enum": ["subscribe", "publish", "pubSub"]})),
                    ("topics", json!({"type": ["array", "null"], "items": {"type": "string"}})),
                    ("isActive", json!({"type": "boolean"})),
                    ("expiresAt", ts()),
                    ("role", nullable("string")),
                    ("metadata", nullable("object")),
                    ("createdAt", ts()),
                    ("updatedAt", ts()),
                ],
            ),
        ),
        ("RoomActorAccessList", array_of("RoomActorAccess")),
        (
            "RoomActorAccessCreate",
            object(
                &["permission"],
                &[
                    ("permission", json!({"enum": ["subscribe", "publish", "pubSub"]})),
                    ("actorTokenId", string()),
                    ("actorType", string()),
                    ("topics", strings()),
                    ("isActive", json!({"const": true})),
                    ("expiresAt", json!({"type": "string", "format": "date-time"})),
                ],
            ),
        ),
        ("Actor", object(&["actorTokenId", "projectId", "actorType"], &actor_props())),
        ("ActorList", array_of("Actor")),
        ("ActorWithToken", object(&["actorTokenId", "projectId", "actorType", "accessToken"], &with_token)),
        (
            "ActorCreate",
            object(
                &["actorType"],
                &[
                    ("name", string()),
                    ("actorType", json!({"enum": ["user", "device", "agent", "orchestrator", "observer", "server"]})),
                ],
            ),
        ),
        (
            "ActorUpdate",
            object(
                &[],
                &[
                    ("name", string()),
                    ("isActive", json!({"type": "boolean"})),
                    ("accessScopeId", json!({"type": "null"})),
                ],
            ),
        ),
        (
            "Publish",
            object(
                &["topic", "data"],
                &[
                    ("topic", json!({"type": "string", "description": "app/room/topic"})),
                    ("data", json!({})),
                    ("filter", string()),
                    ("retain", json!({"type": "boolean"})),
                ],
            ),
        ),
        (
            "Published",
            object(
                &["timestamp"],
                &[
                    ("timestamp", json!({"type": "integer", "description": "unix ms"})),
                    ("msgId", json!({"type": "string", "description": "logged topics only"})),
                ],
            ),
        ),
    ];
    list.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn reference(schema: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{schema}")})
}

/// The error statuses every authenticated route may answer.
fn errors() -> Map<String, Value> {
    let mut m = Map::new();
    for (code, what) in [
        ("400", "Invalid input"),
        ("401", "Missing or invalid API key"),
        ("403", "Not allowed for this project"),
        ("404", "Not found in this project"),
        ("409", "Already exists"),
        ("413", "Body too large"),
        ("429", "Rate limited (Retry-After)"),
        ("503", "Store unavailable; retry"),
    ] {
        m.insert(
            code.to_owned(),
            json!({"description": what, "content": {"application/json": {"schema": reference("Error")}}}),
        );
    }
    m
}

/// The document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for r in ROUTES {
        let mut responses = errors();
        let ok = match r.reply.1 {
            Some(s) => json!({"description": "OK", "content": {"application/json": {"schema": reference(s)}}}),
            None => json!({"description": "Done, no body"}),
        };
        responses.insert(r.reply.0.to_string(), ok);
        let mut op = json!({
            "summary": r.summary,
            "operationId": format!("{} {}", r.method, r.path),
            "parameters": params(r.path).into_iter().map(|p| json!({"name": p, "in": "path", "required": true, "schema": {"type": "string"}})).collect::<Vec<_>>(),
            "responses": responses,
        });
        if r.path == "/v1/apps" && r.method == "get" {
            let q = |n: &str, t: &str| json!({"name": n, "in": "query", "required": false, "schema": {"type": t}});
            op["parameters"] = json!([
                q("page", "integer"),
                q("limit", "integer"),
                q("sortBy", "string"),
                q("sortOrder", "string"),
                q("search", "string")
            ]);
        }
        if let Some(s) = r.request {
            let mut content = json!({"application/json": {"schema": reference(s)}});
            if r.path == "/v1/publish" {
                content["application/msgpack"] = json!({"schema": reference(s)});
            }
            op["requestBody"] = json!({"required": true, "content": content});
        }
        let entry = paths.entry(r.path.to_owned()).or_insert_with(|| json!({}));
        entry[r.method] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Skua REST API",
            "version": "1",
            "description": "NoLag-compatible project API (docs/rest-api.md). Every route needs `Authorization: Bearer <project API key>`.",
        },
        "servers": [{"url": "/"}],
        "security": [{"apiKey": []}],
        "paths": paths,
        "components": {
            "schemas": schemas(),
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route of shared/REST-API-NOTES.md Skua serves (scopes are not served yet), plus
    /// the server-side publish: the document must list each.
    const SDK_ROUTES: &[(&str, &str)] = &[
        ("get", "/v1/apps"),
        ("get", "/v1/apps/{appId}"),
        ("post", "/v1/apps"),
        ("patch", "/v1/apps/{appId}"),
        ("delete", "/v1/apps/{appId}"),
        ("post", "/v1/apps/{appId}/reset-to-blueprint"),
        ("get", "/v1/apps/{appId}/rooms"),
        ("get", "/v1/apps/{appId}/rooms/{roomId}"),
        ("post", "/v1/apps/{appId}/rooms"),
        ("post", "/v1/apps/{appId}/rooms/ensure"),
        ("patch", "/v1/apps/{appId}/rooms/{roomId}"),
        ("delete", "/v1/apps/{appId}/rooms/{roomId}"),
        ("post", "/v1/apps/{appId}/rooms/{roomId}/actors"),
        ("get", "/v1/apps/{appId}/rooms/{roomId}/actors"),
        ("delete", "/v1/apps/{appId}/rooms/{roomId}/actors/{roomActorAccessId}"),
        ("get", "/v1/actors"),
        ("get", "/v1/actors/{actorTokenId}"),
        ("post", "/v1/actors"),
        ("patch", "/v1/actors/{actorTokenId}"),
        ("delete", "/v1/actors/{actorTokenId}"),
        ("post", "/v1/publish"),
    ];

    #[test]
    fn the_document_lists_every_route_with_known_schemas() {
        let doc = document();
        for (m, p) in SDK_ROUTES {
            assert!(doc["paths"][p][m].is_object(), "{m} {p} missing from the OpenAPI document");
        }
        let count: usize = doc["paths"].as_object().unwrap().values().map(|v| v.as_object().unwrap().len()).sum();
        assert_eq!(count, ROUTES.len(), "one operation per route");
        let text = doc.to_string();
        for part in text.split("#/components/schemas/").skip(1) {
            let name = part.split('"').next().unwrap();
            assert!(doc["components"]["schemas"][name].is_object(), "schema {name} is referenced but not defined");
        }
    }
}
