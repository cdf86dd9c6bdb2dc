//! Webhook dead letters (docs/webhooks.md): listing, retrying from the serving node, purging.
//! The records live in the store; the node does the work ([`crate::NodeAdmin`]).

use crate::service::Error;
use skua_core::DeadLetterFilter;
use skua_core::registry_store::RegistryData;

use super::ControlService;
use super::shared::project;
use crate::pb;

/// Which dead letters a retry or purge names: the ids given, else every one when `all`.
fn selection(ids: &[String], all: bool, max: u32) -> Result<(), Error> {
    if ids.is_empty() && !all {
        return Err(Error::invalid_argument("give delivery_ids, or all to select every failure of the project"));
    }
    if ids.len() > max as usize {
        return Err(Error::invalid_argument(format!("at most {max} delivery_ids per call")));
    }
    if ids.iter().any(|id| id.is_empty() || id.len() > 64) {
        return Err(Error::invalid_argument("a delivery id is 1-64 characters"));
    }
    Ok(())
}

/// The stored topic key (`<project>/<app id>/<room>/<topic>`) as clients address it
/// (`app/room/topic`, the app by its slug); the key itself when its app is gone.
fn client_topic(d: &RegistryData, key: &str) -> String {
    let mut parts = key.splitn(4, '/');
    let (Some(_project), Some(app), Some(room), Some(topic)) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return key.to_owned();
    };
    d.apps.get(app).map_or_else(|| key.to_owned(), |a| format!("{}/{room}/{topic}", a.slug))
}

pub(crate) async fn list_failures(
    svc: &ControlService,
    r: pb::ListWebhookFailuresRequest,
) -> Result<pb::ListWebhookFailuresResponse, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let max = svc.limits.max_page_size;
    let limit = if r.limit == 0 { max } else { r.limit.min(max) };
    let filter = DeadLetterFilter { project: Some(&p.id), delivery_ids: &[] };
    let found = svc.sync.node().webhook_failures(filter, r.after_id, limit).await.map_err(Error::unavailable)?;
    let failures = found
        .into_iter()
        .map(|d| pb::WebhookFailure {
            id: d.id,
            topic: client_topic(&snap.data, &d.topic),
            delivery_id: d.delivery_id,
            project_id: d.project,
            kind: d.kind,
            target: d.target,
            last_error: d.last_error,
            attempts: d.attempts,
            failed_at_ms: d.failed_at_ms,
            body: d.body.to_vec(),
        })
        .collect();
    Ok(pb::ListWebhookFailuresResponse { failures })
}

pub(crate) async fn retry_failures(
    svc: &ControlService,
    r: pb::RetryWebhookFailuresRequest,
) -> Result<pb::RetryWebhookFailuresResponse, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let max = svc.limits.max_page_size;
    selection(&r.delivery_ids, r.all, max)?;
    let filter = DeadLetterFilter { project: Some(&p.id), delivery_ids: &r.delivery_ids };
    let done = svc.sync.node().retry_webhook_failures(filter, max).await.map_err(Error::unavailable)?;
    let results = done
        .into_iter()
        .map(|(delivery_id, error)| pb::WebhookRetry {
            delivery_id,
            delivered: error.is_none(),
            error: error.unwrap_or_default(),
        })
        .collect();
    Ok(pb::RetryWebhookFailuresResponse { results })
}

pub(crate) async fn purge_failures(
    svc: &ControlService,
    r: pb::PurgeWebhookFailuresRequest,
) -> Result<pb::PurgeWebhookFailuresResponse, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    selection(&r.delivery_ids, r.all, svc.limits.max_page_size)?;
    let filter = DeadLetterFilter { project: Some(&p.id), delivery_ids: &r.delivery_ids };
    let purged = svc.sync.node().purge_webhook_failures(filter).await.map_err(Error::unavailable)?;
    Ok(pb::PurgeWebhookFailuresResponse { purged })
}
