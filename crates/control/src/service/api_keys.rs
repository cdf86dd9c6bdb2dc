//! Project API keys (the REST API's bearer keys): create (the key returned once, only its
//! SHA-256 stored), list, revoke. A project's delete takes its keys along.

use crate::service::Error;
use skua_core::registry_store::{ApiKeyRecord, Change, Object, ObjectKind, hex};

use super::ControlService;
use super::shared::{del, deleted, name_or, project};
use crate::pb;
use crate::sync::now_ms;
use crate::validate;

/// Most API keys per project (a fixed cap: keys are few by nature).
pub const MAX_API_KEYS_PER_PROJECT: usize = 100;

/// A fresh key `nlg_live_<keyId>.<secret>` and its stored record.
pub(crate) fn new_key(project: &str, name: &str, now_ms: u64) -> (String, ApiKeyRecord) {
    let key_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    // Two v4 UUIDs: 244 random bits from the OS generator.
    let secret = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let key = format!("nlg_live_{key_id}.{secret}");
    let sha256 = hex(&skua_core::registry::digest(&key));
    let record = ApiKeyRecord {
        key_id: key_id.clone(),
        project: project.to_owned(),
        name: name_or(name, &key_id),
        sha256,
        created_at_ms: now_ms,
    };
    (key, record)
}

fn convert(k: &ApiKeyRecord) -> pb::ApiKey {
    pb::ApiKey {
        key_id: k.key_id.clone(),
        project_id: k.project.clone(),
        name: k.name.clone(),
        created_at_ms: k.created_at_ms,
    }
}

pub(crate) async fn create(
    svc: &ControlService,
    r: pb::CreateApiKeyRequest,
) -> Result<pb::CreateApiKeyResponse, Error> {
    if !r.name.is_empty() {
        validate::name("name", &r.name)?;
    }
    let now = now_ms();
    let (key, record) = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let count = d.api_keys.values().filter(|k| k.project == p.id).count();
            if count >= MAX_API_KEYS_PER_PROJECT {
                return Err(Error::failed_precondition(format!(
                    "project {:?} has {count} API keys, the most allowed ({MAX_API_KEYS_PER_PROJECT})",
                    p.id
                )));
            }
            let (key, record) = new_key(&p.id, &r.name, now);
            Ok((vec![Change::Put(Object::ApiKey(record.clone()))], (key, record)))
        })
        .await?;
    tracing::info!(project = %record.project, key_id = %record.key_id, "API key created.");
    Ok(pb::CreateApiKeyResponse { api_key: Some(convert(&record)), key })
}

pub(crate) async fn list(svc: &ControlService, r: pb::ListApiKeysRequest) -> Result<pb::ListApiKeysResponse, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    Ok(pb::ListApiKeysResponse {
        api_keys: snap.data.api_keys.values().filter(|k| k.project == p.id).map(convert).collect(),
    })
}

pub(crate) async fn revoke(svc: &ControlService, r: pb::RevokeApiKeyRequest) -> Result<pb::DeleteResponse, Error> {
    validate::slug("key_id", &r.key_id)?;
    let n = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            match d.api_keys.get(&r.key_id) {
                Some(k) if k.project == p.id => Ok((vec![del(ObjectKind::ApiKey, k.key_id.clone())], 1)),
                _ => Err(Error::not_found(format!("API key {:?} not found in project {:?}", r.key_id, p.id))),
            }
        })
        .await?;
    tracing::info!(key_id = %r.key_id, "API key revoked.");
    Ok(deleted(n))
}
