//! The webhook target fields (URL, headers, timeout) the app and topic forms share, parsed
//! and shown.

use std::collections::HashMap;

use crate::service::Error;
use skua_core::webhook::WebhookKind;

use super::html::{esc, field, textarea};
use super::{Authed, Form};
use crate::pb;

/// A webhook's extra headers from its form field: one `Name: value` a line, empty lines
/// skipped. Names and values are checked by the node's webhook policy when saved (as over the
/// APIs); here only the field's own format.
pub(crate) fn parse_headers(field: &str, text: &str) -> Result<HashMap<String, String>, Error> {
    let mut out: HashMap<String, String> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Error::invalid_argument(format!(
                "{field}.headers: line {} has no ':'; write one `Name: value` a line",
                i + 1
            )));
        };
        let name = name.trim();
        if out.keys().any(|k| k.eq_ignore_ascii_case(name)) {
            return Err(Error::invalid_argument(format!("{field}.headers: header {name} is given twice")));
        }
        out.insert(name.to_owned(), value.trim().to_owned());
    }
    Ok(out)
}

/// The headers field's text: one `Name: value` a line, by name.
pub(crate) fn show_headers(h: &HashMap<String, String>) -> String {
    let mut lines: Vec<String> = h.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    lines.sort();
    lines.join("\n")
}

/// A webhook's timeout from its form field, in ms; empty: 0 (the default).
fn parse_timeout(field: &str, text: &str) -> Result<u32, Error> {
    if text.is_empty() {
        return Ok(0);
    }
    text.parse().map_err(|_| {
        Error::invalid_argument(format!(
            "{field}.timeout_ms must be a whole number of milliseconds (empty: the default)"
        ))
    })
}

/// The webhook of form fields `name` (its URL), `name_headers` and `name_timeout_ms`: `None`
/// when the URL is empty (no webhook); headers or a timeout the form does not carry are kept
/// from `current`.
pub(crate) fn posted_target(
    form: &Form,
    name: &str,
    current: Option<&pb::WebhookTarget>,
) -> Result<Option<pb::WebhookTarget>, Error> {
    let url = form.get(name);
    if url.is_empty() {
        return Ok(None);
    }
    let now = current.cloned().unwrap_or_default();
    let (hk, tk) = (format!("{name}_headers"), format!("{name}_timeout_ms"));
    let headers = if form.has(&hk) { parse_headers(name, form.get(&hk))? } else { now.headers };
    let timeout_ms = if form.has(&tk) { parse_timeout(name, form.get(&tk))? } else { now.timeout_ms };
    Ok(Some(pb::WebhookTarget { url: url.to_owned(), headers, timeout_ms }))
}

/// The fields of webhook `name` of `kind`: its URL (labelled `url_label`), headers and
/// timeout, with what was posted after a refused change, else `current`.
pub(crate) fn target_fields(
    a: &Authed,
    posted: bool,
    kind: WebhookKind,
    name: &str,
    url_label: &str,
    hint: &str,
    current: Option<&pb::WebhookTarget>,
) -> String {
    let (hk, tk) = (format!("{name}_headers"), format!("{name}_timeout_ms"));
    let now = current.cloned().unwrap_or_default();
    let pick = |k: &str, v: String| if posted && a.form.has(k) { a.form.get(k).to_owned() } else { v };
    let timeout = if now.timeout_ms == 0 { String::new() } else { now.timeout_ms.to_string() };
    let short = url_label.replace(" URL", "");
    format!(
        "<fieldset class=\"webhook\"><legend>{}</legend>{}{}{}</fieldset>",
        esc(&short),
        field(name, url_label, &pick(name, now.url.clone()), false, hint),
        textarea(
            &hk,
            &format!("{short}: headers"),
            &pick(&hk, show_headers(&now.headers)),
            "one Name: value a line, sent with every call"
        ),
        field(
            &tk,
            &format!("{short}: timeout (ms)"),
            &pick(&tk, timeout),
            false,
            &format!(
                "empty: the default, {} ms; at most {} ms",
                kind.default_timeout().as_millis(),
                kind.max_timeout().as_millis()
            )
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_one_name_value_a_line() {
        let h = parse_headers("trigger_webhook", "X-Token: abc:def\n\n  X-Env :  prod \n").unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h["X-Token"], "abc:def");
        assert_eq!(h["X-Env"], "prod");
        assert_eq!(show_headers(&h), "X-Env: prod\nX-Token: abc:def");
        let e = parse_headers("trigger_webhook", "X-A: 1\nno colon").unwrap_err();
        assert_eq!(e.message(), "trigger_webhook.headers: line 2 has no ':'; write one `Name: value` a line");
        let e = parse_headers("f", "X-A: 1\nx-a: 2").unwrap_err();
        assert_eq!(e.message(), "f.headers: header x-a is given twice");
        assert!(parse_headers("f", "").unwrap().is_empty());
    }

    #[test]
    fn a_posted_target_keeps_what_the_form_does_not_carry() {
        let current = pb::WebhookTarget {
            url: "http://a.example/x".into(),
            headers: HashMap::from([("X-K".to_owned(), "v".to_owned())]),
            timeout_ms: 2000,
        };
        let form = Form::parse(b"hook=http%3A%2F%2Fb.example%2Fy");
        let t = posted_target(&form, "hook", Some(&current)).unwrap().unwrap();
        assert_eq!((t.url.as_str(), t.headers.len(), t.timeout_ms), ("http://b.example/y", 1, 2000));
        let form = Form::parse(b"hook=http%3A%2F%2Fb.example%2Fy&hook_headers=&hook_timeout_ms=");
        let t = posted_target(&form, "hook", Some(&current)).unwrap().unwrap();
        assert_eq!((t.headers.len(), t.timeout_ms), (0, 0), "emptied: none and the default");
        let form = Form::parse(b"hook=&hook_headers=X-A%3A+1");
        assert_eq!(posted_target(&form, "hook", Some(&current)).unwrap(), None, "no URL: no webhook");
        let form = Form::parse(b"hook=http%3A%2F%2Fb.example%2F&hook_timeout_ms=soon");
        let e = posted_target(&form, "hook", None).unwrap_err();
        assert!(e.message().starts_with("hook.timeout_ms must be a whole number"), "{}", e.message());
    }
}
