//! The OpenAPI 3.1 document of `/v1/openapi.json`: utoipa generates every operation from the
//! handlers' `#[utoipa::path]` and every schema from the body types (`ToSchema`); the router
//! and the document come from one list of handlers ([`super::routes`]). This module adds the
//! document's header and the bearer-key security scheme.

use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The document's header: info, tags and the API-key scheme every operation needs.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Skua REST API",
        version = "1",
        description = "NoLag-compatible project API on Skua's client listener (docs/rest-api.md). Every operation \
                       needs `Authorization: Bearer <project API key>`; errors are `{statusCode, message, error}`."
    ),
    modifiers(&BearerKey),
    security(("apiKey" = [])),
    tags(
        (name = "apps", description = "Apps of the key's project"),
        (name = "rooms", description = "Rooms of an app and their grants"),
        (name = "actors", description = "Actors and their access tokens"),
        (name = "scopes", description = "Access scopes: tenant isolation inside the project"),
        (name = "publish", description = "Server-side publish"),
    )
)]
struct Header;

/// Adds the `apiKey` bearer scheme.
struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "apiKey",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The header the routes are added to.
pub(crate) fn base() -> utoipa::openapi::OpenApi {
    Header::openapi()
}

/// The whole document, as served.
pub fn document() -> Value {
    let (_, doc) = super::routes();
    serde_json::to_value(&doc).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route of shared/REST-API-NOTES.md, plus the server-side publish: the document must
    /// list each.
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
        ("get", "/v1/scopes"),
        ("get", "/v1/scopes/{accessScopeId}"),
        ("post", "/v1/scopes"),
        ("patch", "/v1/scopes/{accessScopeId}"),
        ("delete", "/v1/scopes/{accessScopeId}"),
        ("get", "/v1/scopes/{accessScopeId}/actors"),
        ("post", "/v1/publish"),
    ];

    #[test]
    fn the_document_lists_every_route_of_the_sdks_with_defined_schemas() {
        let doc = document();
        assert_eq!(doc["openapi"].as_str().map(|v| v.starts_with("3.1")), Some(true), "{}", doc["openapi"]);
        for (m, p) in SDK_ROUTES {
            assert!(doc["paths"][p][m].is_object(), "{m} {p} missing from the OpenAPI document");
        }
        let count: usize = doc["paths"].as_object().unwrap().values().map(|v| v.as_object().unwrap().len()).sum();
        assert_eq!(count, SDK_ROUTES.len(), "an undocumented or unexpected operation: {}", doc["paths"]);
        let text = doc.to_string();
        for part in text.split("#/components/schemas/").skip(1) {
            let name = part.split('"').next().unwrap();
            assert!(doc["components"]["schemas"][name].is_object(), "schema {name} is referenced but not defined");
        }
        assert_eq!(doc["components"]["securitySchemes"]["apiKey"]["scheme"], "bearer");
        let app = &doc["components"]["schemas"]["App"]["properties"];
        for key in ["appId", "projectId", "name", "slug", "config", "createdAt"] {
            assert!(app[key].is_object(), "App.{key}: {app}");
        }
        let notes = ["description", "externalId", "metadata"];
        for (schema, keys) in [
            ("App", &["hydrationWebhook", "triggerWebhook", "topicConfigs", "webhookSecret"][..]),
            ("AppCreate", &["hydrationWebhook", "triggerWebhook", "topicConfigs"]),
            ("AppUpdate", &["hydrationWebhook", "triggerWebhook", "topicConfigs"]),
            ("WebhookIn", &["url", "headers", "timeoutMs"]),
            ("App", &notes),
            ("AppCreate", &notes),
            ("AppUpdate", &notes),
            ("Room", &notes),
            ("RoomCreate", &["topics", "isEnabled", "config", "description", "externalId", "metadata"]),
            ("RoomUpdate", &["topics", "isEnabled", "config", "description", "externalId", "metadata"]),
            ("Actor", &notes),
            ("ActorCreate", &notes),
            ("ActorUpdate", &notes),
            ("RoomActorAccess", &["role", "metadata"]),
            ("RoomActorAccessCreate", &["role", "metadata"]),
        ] {
            let props = properties(&doc, &doc["components"]["schemas"][schema]);
            for key in keys {
                assert!(props.get(*key).is_some_and(Value::is_object), "{schema}.{key}: {props:?}");
            }
        }
    }

    /// The properties of `schema`, those of its `allOf` parts (serde's `flatten`) included.
    fn properties(doc: &Value, schema: &Value) -> serde_json::Map<String, Value> {
        let mut out = schema["properties"].as_object().cloned().unwrap_or_default();
        for part in schema["allOf"].as_array().into_iter().flatten() {
            let part = match part["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/")) {
                Some(name) => &doc["components"]["schemas"][name],
                None => part,
            };
            out.extend(properties(doc, part));
        }
        out
    }
}
