//! The delivery engine against a real HTTP receiver (skua_conformance::WebhookReceiver).

mod engine;
