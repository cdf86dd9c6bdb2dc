//! The delivery engine against a real HTTP receiver (skua_testkit::WebhookReceiver).

mod engine;
