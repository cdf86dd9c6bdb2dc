//! The edge's [`Hydrator`] over the webhook engine (N43): posts `{deliveryId, timestamp,
//! projectId, app, room, roomName, topicName, actorId, actorType, clientId?, scope}` to the
//! topic's hydration webhook (3 attempts on 5xx and transport errors, 1 s then 2 s apart, all
//! within the webhook's timeout) and turns a 2xx JSON answer into one MessagePack value.

use bytes::Bytes;
use serde_json::{Map, Value as Json};
use skua_edge::hydrate::{HydrationError, HydrationRequest, Hydrator};
use skua_webhooks::{RetrySchedule, WebhookRequest, WebhookSender};

/// Hydration through the node's [`WebhookSender`].
#[derive(Debug, Clone)]
pub struct WebhookHydrator(pub WebhookSender);

/// The webhook body of a hydration request (without `deliveryId` and `timestamp`).
pub fn payload(r: &HydrationRequest) -> Map<String, Json> {
    let mut m = Map::new();
    m.insert("projectId".into(), r.project_id.as_str().into());
    m.insert("app".into(), (*r.call.app_slug).into());
    m.insert("room".into(), (*r.room).into());
    m.insert("roomName".into(), (*r.call.room_name).into());
    m.insert("topicName".into(), (*r.topic_name).into());
    m.insert("actorId".into(), r.actor_id.as_str().into());
    m.insert("actorType".into(), r.actor_type.as_str().into());
    if let Some(c) = &r.client_id {
        m.insert("clientId".into(), c.as_str().into());
    }
    m.insert("scope".into(), r.scope.clone());
    m
}

/// A JSON value as MessagePack: integers stay integers, other numbers become float64.
pub fn to_msgpack(v: &Json) -> rmpv::Value {
    match v {
        Json::Null => rmpv::Value::Nil,
        Json::Bool(b) => rmpv::Value::Boolean(*b),
        Json::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => rmpv::Value::from(u),
            (None, Some(i)) => rmpv::Value::from(i),
            _ => rmpv::Value::F64(n.as_f64().unwrap_or(0.0)),
        },
        Json::String(s) => rmpv::Value::from(s.as_str()),
        Json::Array(a) => rmpv::Value::Array(a.iter().map(to_msgpack).collect()),
        Json::Object(o) => {
            rmpv::Value::Map(o.iter().map(|(k, v)| (rmpv::Value::from(k.as_str()), to_msgpack(v))).collect())
        }
    }
}

#[async_trait::async_trait]
impl Hydrator for WebhookHydrator {
    async fn hydrate(&self, r: HydrationRequest) -> Result<Bytes, HydrationError> {
        let budget = r.call.target.timeout(r.call.kind);
        let request = WebhookRequest::new(r.call.clone(), payload(&r));
        let answer = self
            .0
            .call(&request, &RetrySchedule::hydration(), budget)
            .await
            .map_err(|e| HydrationError { reason: e.outcome().as_str(), detail: crate::errors::error_chain(&e) })?;
        let json: Json = serde_json::from_slice(&answer.body).map_err(|e| HydrationError {
            reason: "not_json",
            detail: format!("HTTP {} answer ({} bytes) is not JSON: {e}", answer.status, answer.body.len()),
        })?;
        let mut out = Vec::with_capacity(answer.body.len());
        rmpv::encode::write_value(&mut out, &to_msgpack(&json))
            .map_err(|e| HydrationError { reason: "not_json", detail: e.to_string() })?;
        Ok(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_becomes_the_same_msgpack_value() {
        let j: Json = serde_json::from_str(r#"{"a":[1,-2,1.5,"x",null,true],"b":{}}"#).unwrap();
        let m = to_msgpack(&j);
        let mut buf = Vec::new();
        rmpv::encode::write_value(&mut buf, &m).unwrap();
        let back = rmpv::decode::read_value(&mut buf.as_slice()).unwrap();
        assert_eq!(back["a"][0].as_u64(), Some(1));
        assert_eq!(back["a"][1].as_i64(), Some(-2));
        assert_eq!(back["a"][2].as_f64(), Some(1.5));
        assert_eq!(back["a"][3].as_str(), Some("x"));
        assert!(back["a"][4].is_nil());
        assert!(back["b"].as_map().is_some_and(Vec::is_empty));
    }
}
