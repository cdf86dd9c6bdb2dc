//! `skua admin api-keys create|list|revoke`: project API keys (the REST API's bearer keys).

use clap::Subcommand;
use serde_json::{Value, json};
use skua_control::pb;

use super::{Client, Failure, json::Out};

/// The `api-keys` subcommands.
#[derive(Debug, Subcommand)]
pub(super) enum ApiKeyCmd {
    /// Create an API key for the project; prints the key once.
    Create {
        /// What the key is for.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// List the project's API keys (ids and names, never the keys).
    List,
    /// Revoke an API key (requests with it fail 401).
    Revoke {
        /// Key id (the `<keyId>` of `nlg_live_<keyId>.<secret>`).
        key_id: String,
    },
}

fn api_key(k: &pb::ApiKey) -> Value {
    json!({"key_id": k.key_id, "project_id": k.project_id, "name": k.name, "created_at_ms": k.created_at_ms})
}

pub(super) async fn execute(c: &mut Client, project: String, out: &Out, cmd: ApiKeyCmd) -> Result<String, Failure> {
    Ok(match cmd {
        ApiKeyCmd::Create { name } => {
            let r = c.create_api_key(pb::CreateApiKeyRequest { project_id: project, name }).await?.into_inner();
            let k = r.api_key.unwrap_or_default();
            out.emit(json!({"api_key": api_key(&k), "key": r.key}), || {
                format!(
                    "API key {} ({}, project {})\nkey (shown once, store it now):\n{}",
                    k.key_id, k.name, k.project_id, r.key
                )
            })
        }
        ApiKeyCmd::List => {
            let keys = c.list_api_keys(pb::ListApiKeysRequest { project_id: project }).await?.into_inner().api_keys;
            out.emit(Value::Array(keys.iter().map(api_key).collect()), || {
                let mut rows = vec![vec!["KEY ID".into(), "NAME".into(), "PROJECT".into()]];
                rows.extend(keys.iter().map(|k| vec![k.key_id.clone(), k.name.clone(), k.project_id.clone()]));
                super::json::table(&rows)
            })
        }
        ApiKeyCmd::Revoke { key_id } => {
            let r = pb::RevokeApiKeyRequest { project_id: project, key_id };
            out.deleted(&c.revoke_api_key(r).await?.into_inner())
        }
    })
}
