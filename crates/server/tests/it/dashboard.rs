//! The admin dashboard under `/admin` (issue 20), over raw HTTP/1.1 against a real node:
//! sign-in, every page and form refused without the session, CSRF and cross-site refusals,
//! an app created through the form (with the API's validation messages), and the live topic
//! view showing a WebSocket client's publish and a test publish.

use std::net::SocketAddr;
use std::time::Duration;

use skua_testkit::{TestServer, frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Whether the node serves an app `slug` in the demo project.
fn has_app(s: &TestServer, slug: &str) -> bool {
    let demo = skua_core::ProjectId::parse("demo-project").unwrap();
    s.registry.load().project(&demo).is_some_and(|p| p.apps.iter().any(|a| a.slug == slug))
}

/// The admin key of test servers.
const ADMIN_KEY: &str = skua_testkit::server::TEST_ADMIN_KEY;

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The CSRF token of the page's forms.
    fn csrf(&self) -> String {
        let at = self.body.find("name=\"csrf\" value=\"").expect("a form with a CSRF field") + 19;
        self.body[at..at + 64].to_owned()
    }
}

/// `method path` with extra `headers` and a form `body`.
async fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!(
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    s.write_all(req.as_bytes()).await.expect("write request");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await.expect("reply within 10 s").ok();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).expect("status line");
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    Reply { status, headers, body: body.to_owned() }
}

/// A signed-in browser: its cookie and the CSRF token of its session.
struct Browser {
    addr: SocketAddr,
    cookie: String,
    csrf: String,
}

impl Browser {
    async fn sign_in(addr: SocketAddr) -> Self {
        let r = http(addr, "POST", "/admin/login", &[], &format!("admin_key={ADMIN_KEY}")).await;
        assert_eq!(r.status, 303, "{r:?}");
        assert_eq!(r.header("location"), Some("/admin"));
        let set = r.header("set-cookie").expect("a session cookie").to_owned();
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/admin"), "{set}");
        assert!(!set.contains("Secure"), "no TLS, no Secure: {set}");
        let cookie = set.split(';').next().unwrap().to_owned();
        let page = http(addr, "GET", "/admin", &[("Cookie", &cookie)], "").await;
        assert_eq!(page.status, 200, "{page:?}");
        let csrf = page.csrf();
        Self { addr, cookie, csrf }
    }

    async fn get(&self, path: &str) -> Reply {
        http(self.addr, "GET", path, &[("Cookie", &self.cookie)], "").await
    }

    /// A same-origin form post with the session's CSRF token.
    async fn post(&self, path: &str, form: &str) -> Reply {
        let origin = format!("http://{}", self.addr);
        let body = format!("csrf={}&{form}", self.csrf);
        http(
            self.addr,
            "POST",
            path,
            &[("Cookie", &self.cookie), ("Origin", &origin), ("Sec-Fetch-Site", "same-origin")],
            &body,
        )
        .await
    }
}

const PAGES: [&str; 25] = [
    "/admin/connections?project=demo-project",
    "/admin/projects/edit?project=demo-project",
    "/admin/actors/edit?project=demo-project&actor=alice",
    "/admin/scopes/edit?project=demo-project&scope=acme",
    "/admin/apps/topic?project=demo-project&app=demo&topic=feed",
    "/admin/lobbies/edit?project=demo-project&lobby=hall",
    "/admin/durable",
    "/admin/durable?project=demo-project&after=g%2Fdemo-project%2F",
    "/admin/lobbies",
    "/admin/scopes",
    "/admin/apps/edit?project=demo-project&app=demo",
    "/admin/rooms/edit?project=demo-project&app=demo&room=general",
    "/admin/api-keys",
    "/admin/presence?project=demo-project&app=demo&room=general",
    "/admin",
    "/admin/stats",
    "/admin/projects",
    "/admin/apps",
    "/admin/rooms",
    "/admin/actors",
    "/admin/grants",
    "/admin/webhooks",
    "/admin/live",
    "/admin/live/poll?view=1",
    "/admin/apps?project=demo-project",
];

const FORMS: [&str; 30] = [
    "/admin/projects/edit",
    "/admin/actors/edit",
    "/admin/actors/rotate",
    "/admin/scopes/edit",
    "/admin/apps/topic",
    "/admin/lobbies/edit",
    "/admin/scopes/state",
    "/admin/lobbies",
    "/admin/lobbies/delete",
    "/admin/scopes",
    "/admin/scopes/delete",
    "/admin/apps/edit",
    "/admin/rooms/edit",
    "/admin/api-keys",
    "/admin/api-keys/delete",
    "/admin/logout",
    "/admin/projects",
    "/admin/projects/delete",
    "/admin/apps",
    "/admin/apps/delete",
    "/admin/rooms",
    "/admin/rooms/delete",
    "/admin/actors",
    "/admin/actors/delete",
    "/admin/grants",
    "/admin/grants/delete",
    "/admin/webhooks/retry",
    "/admin/live",
    "/admin/live/publish",
    "/admin/projects?x=1",
];

#[tokio::test]
async fn every_page_and_form_needs_the_session() {
    let s = TestServer::start().await;
    for p in PAGES {
        let r = http(s.addr, "GET", p, &[], "").await;
        assert_eq!((r.status, r.header("location")), (303, Some("/admin/login")), "GET {p}: {r:?}");
        let r = http(s.addr, "GET", p, &[("Cookie", "skua_admin=forged")], "").await;
        assert_eq!(r.status, 303, "GET {p} with a forged cookie: {r:?}");
    }
    for p in FORMS {
        let r = http(s.addr, "POST", p, &[], "csrf=x&project=demo-project&slug=sneaky").await;
        assert_eq!(r.status, 403, "POST {p}: {r:?}");
    }
    assert!(!has_app(&s, "sneaky"));
    // The sign-in page and the embedded assets need no session.
    let r = http(s.addr, "GET", "/admin/login", &[], "").await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("<label for=\"admin_key\">Admin key</label>"), "{}", r.body);
    for a in ["/admin/assets/app.css", "/admin/assets/app.js"] {
        assert_eq!(http(s.addr, "GET", a, &[], "").await.status, 200, "{a}");
    }
}

#[tokio::test]
async fn sign_in_takes_the_admin_key_and_sign_out_ends_the_session() {
    let s = TestServer::start().await;
    let r = http(s.addr, "POST", "/admin/login", &[], "admin_key=not-the-key").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.header("set-cookie").is_none());
    assert!(r.body.contains("Invalid admin key."), "{}", r.body);
    let b = Browser::sign_in(s.addr).await;
    let page = b.get("/admin").await;
    assert!(page.body.contains(&s.state.node.to_string()), "the overview names the node");
    let stats = b.get("/admin/stats").await;
    assert_eq!(stats.status, 200);
    let v: serde_json::Value = serde_json::from_str(&stats.body).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["samples"].is_array(), "{v}");
    let r = b.post("/admin/logout", "").await;
    assert_eq!((r.status, r.header("location")), (303, Some("/admin/login")), "{r:?}");
    assert_eq!(b.get("/admin").await.status, 303, "the old cookie no longer works");
    assert_eq!(b.post("/admin/apps", "project=demo-project&slug=late").await.status, 403);
}

#[tokio::test]
async fn csrf_token_and_same_site_are_required() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let cookie = [("Cookie", b.cookie.as_str())];
    let form = "project=demo-project&slug=csrf-test";
    let r = http(s.addr, "POST", "/admin/apps", &cookie, form).await;
    assert_eq!(r.status, 403, "no token: {r:?}");
    let r = http(s.addr, "POST", "/admin/apps", &cookie, &format!("csrf={}&{form}", "0".repeat(64))).await;
    assert_eq!(r.status, 403, "wrong token: {r:?}");
    assert!(r.body.contains("CSRF"), "{r:?}");
    let good = format!("csrf={}&{form}", b.csrf);
    let evil = [("Cookie", b.cookie.as_str()), ("Origin", "http://evil.example")];
    let r = http(s.addr, "POST", "/admin/apps", &evil, &good).await;
    assert_eq!(r.status, 403, "cross-site Origin: {r:?}");
    assert!(r.body.contains("cross-site"), "{r:?}");
    let evil = [("Cookie", b.cookie.as_str()), ("Sec-Fetch-Site", "cross-site")];
    assert_eq!(http(s.addr, "POST", "/admin/apps", &evil, &good).await.status, 403, "Sec-Fetch-Site cross-site");
    let r =
        http(s.addr, "POST", "/admin/login", &[("Origin", "http://evil.example")], &format!("admin_key={ADMIN_KEY}"))
            .await;
    assert_eq!(r.status, 403, "a cross-site sign-in: {r:?}");
    let app = |slug: &str| has_app(&s, slug);
    assert!(!app("csrf-test"), "nothing refused was created");
    // The same form with the token, same-site: created.
    assert_eq!(b.post("/admin/apps", form).await.status, 303);
    assert!(app("csrf-test"));
}

#[tokio::test]
async fn an_app_and_a_room_are_created_through_the_forms_with_the_apis_validation() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let r = b.post("/admin/apps", "project=demo-project&slug=shop&name=Shop&topics=orders%2C+chat&logged=orders").await;
    assert_eq!(r.status, 303, "{r:?}");
    let to = r.header("location").unwrap().to_owned();
    assert!(to.starts_with("/admin/apps?project=demo-project&done="), "{to}");
    let page = b.get(&to).await;
    assert!(page.body.contains("App shop created."), "{}", page.body);
    assert!(page.body.contains("orders (logged), chat"), "{}", page.body);
    assert!(has_app(&s, "shop"), "the node serves the new app");
    // The service's checks and messages, as over gRPC and REST.
    let r = b.post("/admin/apps", "project=demo-project&slug=bad+slug").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("role=\"alert\"") && r.body.contains("slug &quot;bad slug&quot; is invalid"), "{}", r.body);
    let r = b.post("/admin/apps", "project=demo-project&slug=shop").await;
    assert_eq!(r.status, 409, "{r:?}");
    assert!(r.body.contains("already exists"), "{}", r.body);
    let r = b.post("/admin/rooms", "project=demo-project&app=shop&room=lobby").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get("/admin/rooms?project=demo-project&app=shop").await;
    assert!(page.body.contains("<td>lobby</td>"), "{}", page.body);
    let r = b.post("/admin/rooms", "project=demo-project&app=nope&room=lobby").await;
    assert_eq!(r.status, 404, "{r:?}");
    // Deleting through the form.
    let r = b.post("/admin/rooms/delete", "project=demo-project&app=shop&room=lobby").await;
    assert_eq!(r.status, 303, "{r:?}");
    assert!(!b.get("/admin/rooms?project=demo-project&app=shop").await.body.contains("<td>lobby</td>"));
}

#[tokio::test]
async fn an_app_and_a_room_are_edited_through_the_forms_with_the_apis_validation() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let page = b.get("/admin/apps?project=demo-project").await;
    assert!(page.body.contains("href=\"/admin/apps/edit?project=demo-project&amp;app=demo\""), "{}", page.body);
    let page = b.get("/admin/apps/edit?project=demo-project&app=demo").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("<label for=\"f-trigger_webhook\">Trigger webhook URL</label>"), "{}", page.body);
    // The API's webhook check: a cloud metadata address is refused, the typed value kept.
    let r = b
        .post(
            "/admin/apps/edit",
            "project=demo-project&app=demo&name=Demo&hydration_webhook=http%3A%2F%2F169.254.169.254%2Fx",
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("role=\"alert\"") && r.body.contains("link-local or cloud metadata"), "{}", r.body);
    assert!(r.body.contains("value=\"http://169.254.169.254/x\""), "{}", r.body);
    let long = "x".repeat(1000);
    let r = b.post("/admin/apps/edit", &format!("project=demo-project&app=demo&name={long}")).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("name is longer than"), "{}", r.body);
    let r = b.post("/admin/apps/edit", "project=demo-project&app=nope&name=x").await;
    assert_eq!(r.status, 404, "{r:?}");
    // A new name and a trigger webhook: a publish reaches the receiver.
    let body = format!("project=demo-project&app=demo&name=Demo+2&trigger_webhook={}", q(&receiver.url("/t")));
    let r = b.post("/admin/apps/edit", &body).await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("App demo saved."), "{}", page.body);
    assert!(page.body.contains("value=\"Demo 2\""), "{}", page.body);
    assert!(page.body.contains(&format!("value=\"{}\"", receiver.url("/t"))), "{}", page.body);
    let mut alice = s.auth("dev-token-alice").await;
    alice.publish_acked("demo/general/messages", "to the hook".into()).await;
    let got = receiver.wait_for(1).await;
    assert_eq!(got[0].json()["topic"], "demo/general/messages", "{:?}", got[0]);
    // An empty URL removes it.
    let r = b.post("/admin/apps/edit", "project=demo-project&app=demo&name=Demo+2&trigger_webhook=").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("value=\"\"") && !page.body.contains(&receiver.url("/t")), "{}", page.body);

    // A room's name.
    let page = b.get("/admin/rooms?project=demo-project&app=demo").await;
    assert!(
        page.body.contains("href=\"/admin/rooms/edit?project=demo-project&amp;app=demo&amp;room=general\""),
        "{}",
        page.body
    );
    let r = b.post("/admin/rooms/edit", "project=demo-project&app=demo&room=general&name=Town+square").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Room general saved.") && page.body.contains("<td>Town square</td>"), "{}", page.body);
    let r = b.post("/admin/rooms/edit", &format!("project=demo-project&app=demo&room=general&name={long}")).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("name is longer than"), "{}", r.body);
    let r = b.post("/admin/rooms/edit", "project=demo-project&app=demo&room=nope&name=x").await;
    assert_eq!(r.status, 404, "{r:?}");
    let page = b.get("/admin/rooms/edit?project=demo-project&app=demo&room=nope").await;
    assert_eq!(page.status, 404, "{page:?}");
}

#[tokio::test]
async fn lobbies_and_access_scopes_are_listed_created_and_deleted_through_the_forms() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let r = b
        .post(
            "/admin/lobbies",
            "project=demo-project&app=demo&lobby=hall&rooms=general%2C+random&allowed_actor_types=user",
        )
        .await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Lobby hall created."), "{}", page.body);
    assert!(
        page.body.contains("edit</a>)</td><td>demo</td><td>general, random</td><td>type user</td>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("<td>hall (<a href=\"/admin/lobbies/edit?project=demo-project&amp;lobby=hall\""));
    // The service's checks and messages.
    let r = b.post("/admin/lobbies", "project=demo-project&app=demo&lobby=bad+slug").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("role=\"alert\"") && r.body.contains("is invalid"), "{}", r.body);
    let r = b.post("/admin/lobbies", "project=demo-project&app=demo&lobby=hall").await;
    assert_eq!(r.status, 409, "{r:?}");
    let r = b.post("/admin/lobbies", "project=demo-project&app=demo&lobby=other&rooms=nope").await;
    assert!(r.status == 400 || r.status == 404, "an unknown room: {r:?}");
    assert!(r.body.contains("nope"), "{}", r.body);
    let r = b.post("/admin/lobbies/delete", "project=demo-project&lobby=hall").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Lobby hall deleted.") && !page.body.contains("<td>hall ("), "{}", page.body);
    let r = b.post("/admin/lobbies/delete", "project=demo-project&lobby=hall").await;
    assert_eq!(r.status, 404, "{r:?}");

    let r = b.post("/admin/scopes", "project=demo-project&scope=acme&name=Acme+Inc").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Scope acme created."), "{}", page.body);
    assert!(page.body.contains("edit</a>)</td><td>Acme Inc</td><td>active <form"), "{}", page.body);
    assert!(page.body.contains("Deactivate acme</button></form></td><td>0</td>"), "{}", page.body);
    let r = b.post("/admin/scopes", "project=demo-project&scope=acme").await;
    assert_eq!(r.status, 409, "{r:?}");
    assert!(r.body.contains("already exists"), "{}", r.body);
    let r = b.post("/admin/scopes", "project=demo-project&scope=bad+slug").await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = b.post("/admin/scopes/delete", "project=demo-project&scope=acme").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Scope acme deleted.") && !page.body.contains("<td>acme ("), "{}", page.body);
}

/// `s` form-encoded (letters, digits and `.-_` as they are).
fn q(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }
        })
        .collect()
}

/// Polls the live view until a message whose text contains `needle` arrives (bounded).
async fn live_message(b: &Browser, view: &str, needle: &str) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = b.get(&format!("/admin/live/poll?view={view}&after=0")).await;
        assert_eq!(r.status, 200, "{r:?}");
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["closed"], false, "{v}");
        if let Some(m) = v["messages"].as_array().unwrap().iter().find(|m| m["text"].as_str().unwrap().contains(needle))
        {
            return m.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no message with {needle:?} in the live view: {v}");
        // The page's own polling interval is 1 s; the test asks more often.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_live_view_shows_a_clients_publish_and_a_test_publish() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let r = b.post("/admin/live", "project=demo-project&topic=demo%2Fgeneral%2Fnope").await;
    assert_eq!(r.status, 404, "an unknown topic: {r:?}");
    let r = b.post("/admin/live", "project=demo-project&topic=demo%2Fgeneral%2Fmessages").await;
    assert_eq!(r.status, 303, "{r:?}");
    let to = r.header("location").unwrap().to_owned();
    let view = to.strip_prefix("/admin/live?view=").expect("the view's page").to_owned();
    let page = b.get(&to).await;
    assert!(page.body.contains(&format!("data-view=\"{view}\"")), "{}", page.body);
    // The view's bus subscription is in place once the watch form answered.
    let mut alice = s.auth("dev-token-alice").await;
    alice.publish_acked("demo/general/messages", frame! {"text" => "hello dashboard"}).await;
    let m = live_message(&b, &view, "hello dashboard").await;
    assert_eq!(m["from"], "alice", "{m}");
    assert_eq!(m["text"], "{\n  \"text\": \"hello dashboard\"\n}", "decoded as JSON: {m}");
    // A test publish through the server-side publish reaches the view and a subscriber.
    let mut bob = s.auth("dev-token-bob").await;
    bob.subscribe("demo/general/messages").await;
    let r = b
        .post(
            "/admin/live/publish",
            &format!("view={view}&project=demo-project&topic=demo%2Fgeneral%2Fmessages&data=%7B%22n%22%3A42%7D"),
        )
        .await;
    assert_eq!(r.status, 303, "{r:?}");
    let m = live_message(&b, &view, "42").await;
    assert_eq!(m["from"], "server", "{m}");
    let got = bob.next_of("message").await;
    assert_eq!(got.get("data").as_map().unwrap()[0].1.as_u64(), Some(42));
    // Data that is not JSON is refused with a message.
    let r = b.post("/admin/live/publish", "project=demo-project&topic=demo%2Fgeneral%2Fmessages&data=%7Bnope").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("data is not JSON"), "{}", r.body);
}

#[tokio::test]
async fn a_grant_revoked_through_the_form_ends_the_clients_subscription() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let mut alice = s.auth("dev-token-alice").await;
    alice.subscribe("demo/ops/messages").await;
    // Bob gets a grant of his own, so that the room stays private once alice's goes.
    let r = b.post("/admin/grants", "project=demo-project&app=demo&room=ops&actor_id=bob&permission=pubSub").await;
    assert_eq!(r.status, 303, "{r:?}");
    let r = b.post("/admin/grants", "project=demo-project&app=demo&room=ops&actor_id=bob&permission=everything").await;
    assert_eq!(r.status, 400, "the service's permission check: {r:?}");
    let page = b.get("/admin/grants?project=demo-project&app=demo&room=ops").await;
    let row = page.body.split("<tr>").find(|row| row.contains("<td>alice</td>")).expect("alice's grant is listed");
    let at = row.find("name=\"grant\" value=\"").expect("its revoke form") + 20;
    let id = &row[at..at + row[at..].find('"').unwrap()];
    let r = b.post("/admin/grants/delete", &format!("project=demo-project&app=demo&room=ops&grant={id}")).await;
    assert_eq!(r.status, 303, "{r:?}");
    let f = alice.expect_error("unknown_topic").await;
    assert_eq!((f.int("code"), f.str("topic")), (42940, "demo/ops/messages"));
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains(&format!("Grant {id} revoked.")), "{}", page.body);
    assert!(!page.body.contains("<td>alice</td>"), "{}", page.body);
}

#[tokio::test]
async fn the_presence_view_lists_who_is_in_a_room() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let page = b.get("/admin/presence?project=demo-project&app=demo&room=general").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("Nobody is in this room."), "{}", page.body);
    let mut alice = s.auth("dev-token-alice").await;
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"status" => "online"}}).await;
    alice.expect("presence").await;
    let page = b.get("/admin/presence?project=demo-project&app=demo&room=general").await;
    assert!(page.body.contains("In demo/general: 1"), "{}", page.body);
    assert!(page.body.contains("<td>alice</td>"), "{}", page.body);
    assert!(page.body.contains("&quot;status&quot;: &quot;online&quot;"), "{}", page.body);
    let page = b.get("/admin/presence?project=demo-project&app=demo&room=nope").await;
    assert_eq!(page.status, 404, "{page:?}");
    assert!(page.body.contains("role=\"alert\""), "{}", page.body);
}

/// Issue 37: devices are listed with the SDK clients, each with its protocol.
#[tokio::test]
async fn the_connections_page_lists_devices_with_their_protocol() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = TestServer::builder().settings(|s| s.node.mqtt_listen = Some("127.0.0.1:0".into())).spawn().await;
    let b = Browser::sign_in(s.addr).await;
    let page = b.get("/admin/connections?project=demo-project").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("No open connections."), "{}", page.body);
    let _alice = s.auth("dev-token-alice").await;
    // A 3.1.1 CONNECT of carol (client id "dev-1"), then its CONNACK.
    let mut connect = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0xC2, 0, 30, 0, 5];
    connect.extend_from_slice(b"dev-1");
    connect.extend_from_slice(&[0, 6]);
    connect.extend_from_slice(b"device");
    connect.extend_from_slice(&[0, 15]);
    connect.extend_from_slice(b"dev-token-carol");
    let mut packet = vec![0x10, u8::try_from(connect.len()).unwrap()];
    packet.extend(connect);
    let mut carol = tokio::net::TcpStream::connect(s.mqtt_addr.unwrap()).await.unwrap();
    carol.write_all(&packet).await.unwrap();
    let mut ack = [0u8; 4];
    carol.read_exact(&mut ack).await.unwrap();
    assert_eq!(ack, [0x20, 2, 0, 0], "CONNACK accepted");
    let page = b.get("/admin/connections?project=demo-project").await;
    assert!(page.body.contains("Open connections of demo-project: 2"), "{}", page.body);
    assert!(page.body.contains("<td>carol</td><td>mqtt</td>"), "{}", page.body);
    assert!(page.body.contains("<td>alice</td><td>ws</td>"), "{}", page.body);
}

#[tokio::test]
async fn a_failed_webhook_shows_in_the_dead_letters_and_the_retry_button_delivers_it() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let receiver = WebhookReceiver::start(Mode::Status(500)).await;
    let s = TestServer::builder()
        .fixtures(&super::triggers::fixtures(&receiver.url("/t"), &receiver.url("/other")))
        .settings(|s| s.webhooks.webhook_trigger_attempts = Some(1))
        .spawn()
        .await;
    let b = Browser::sign_in(s.addr).await;
    let mut c = s.auth("hooks-token-pub").await;
    c.publish_acked("h/r/events", "will fail".into()).await;
    receiver.wait_for(1).await;
    let d = skua_testkit::control::Deadline::new("the dead letter on the page", Duration::from_secs(10));
    let page = loop {
        let page = b.get("/admin/webhooks?project=hooks").await;
        assert_eq!(page.status, 200, "{page:?}");
        if page.body.contains("<td>h/r/events</td>") {
            break page;
        }
        d.tick().await;
    };
    assert!(page.body.contains(&esc_url(&receiver.url("/t"))), "the target is shown: {}", page.body);
    let at = page.body.find("name=\"delivery\" value=\"").expect("a retry form") + 23;
    let id = page.body[at..at + page.body[at..].find('"').unwrap()].to_owned();
    // Still failing: the page says so, the dead letter stays.
    let r = b.post("/admin/webhooks/retry", &format!("project=hooks&delivery={id}")).await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains(&format!("role=\"alert\" id=\"error\">Delivery {id} failed again")), "{}", page.body);
    assert!(page.body.contains("<td>h/r/events</td>"));
    // The receiver is back: the retry delivers it and the page is empty.
    receiver.set_mode(Mode::Ok(serde_json::json!({})));
    let r = b.post("/admin/webhooks/retry", &format!("project=hooks&delivery={id}")).await;
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains(&format!("Delivery {id} delivered.")), "{}", page.body);
    assert!(page.body.contains("No dead letters"), "{}", page.body);
    assert_eq!(receiver.requests().len(), 3, "the first attempt and two retries");

    // The node's recent deliveries, newest first: the retry that worked, then both failures,
    // each with the target's host only (never its path).
    let at = page.body.find("<section id=\"recent\" data-refresh=\"5\"").expect("the recent deliveries");
    let recent = &page.body[at..];
    let host = receiver.url("/t").trim_start_matches("http://").trim_end_matches("/t").to_owned();
    let rows: Vec<&str> = recent.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 3, "{recent}");
    assert!(rows[0].contains(&format!("<td>trigger</td><td>{host}</td><td>ok</td><td>200</td>")), "{}", rows[0]);
    for r in &rows[1..] {
        let failed = format!("<td>trigger</td><td>{host}</td><td><strong>status</strong></td><td>500</td>");
        assert!(r.contains(&failed) && r.contains(" ms</td>"), "{r}");
    }
    assert!(!recent.contains(&receiver.url("/t")), "no URL, only its host: {recent}");
}

/// `s` as the pages write it (HTML-escaped).
fn esc_url(s: &str) -> String {
    s.replace('&', "&amp;")
}

#[tokio::test]
async fn an_api_key_made_on_the_page_works_over_rest_until_revoked_there() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let r = b.post("/admin/api-keys", "project=demo-project&name=ci").await;
    assert_eq!(r.status, 200, "{r:?}");
    let at = r.body.find("The key (shown once): ").expect("the new key is shown") + 22;
    let key = r.body[at..at + r.body[at..].find('<').unwrap()].to_owned();
    assert!(key.starts_with("nlg_live_"), "{key}");
    let key_id = key.strip_prefix("nlg_live_").unwrap().split('.').next().unwrap().to_owned();
    assert!(r.body.contains(&format!("<code>{key_id}</code>")), "listed: {}", r.body);
    let rest = |key: String| async move {
        http(s.addr, "GET", "/v1/apps", &[("Authorization", &format!("Bearer {key}"))], "").await.status
    };
    assert_eq!(rest(key.clone()).await, 200);
    let r = b.post("/admin/api-keys/delete", &format!("project=demo-project&key={key_id}")).await;
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(rest(key.clone()).await, 401, "revoked");
    let r = b.post("/admin/api-keys/delete", &format!("project=demo-project&key={key_id}")).await;
    assert_eq!(r.status, 404, "already revoked: {r:?}");
}

/// The cells of the durable page's row of group `group`.
fn group_row(body: &str, group: &str) -> Option<Vec<String>> {
    let cell = format!("<td>{group}</td>");
    body.split("<tr>")
        .find(|r| r.contains(&cell))
        .map(|r| r.split("<td>").skip(1).map(|c| c.split("</td>").next().unwrap_or_default().to_owned()).collect())
}

/// The row of `group` on the durable page `path` once `want` holds for it (acks and a closed
/// member's release land in the store shortly after the frames that cause them).
async fn durable_row(b: &Browser, path: &str, group: &str, want: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = b.get(path).await;
        assert_eq!(r.status, 200, "{r:?}");
        if let Some(row) = group_row(&r.body, group)
            && want(&row)
        {
            return row;
        }
        assert!(tokio::time::Instant::now() < deadline, "group {group} never got there: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `rel="next"` link of a page, unescaped.
fn next_link(body: &str) -> Option<String> {
    let at = body.find("rel=\"next\"")?;
    let start = body[..at].rfind("href=\"")? + 6;
    let end = start + body[start..].find('"')?;
    Some(body[start..end].replace("&amp;", "&"))
}

#[tokio::test]
async fn the_durable_page_shows_each_groups_backlog_oldest_message_and_local_members() {
    const TASKS: &str = "demo/general/tasks";
    let s = TestServer::builder().settings(|c| c.control.dashboard_page_size = Some(1)).spawn().await;
    let b = Browser::sign_in(s.addr).await;
    let empty = b.get("/admin/durable?project=demo-project").await;
    assert_eq!(empty.status, 200, "{empty:?}");
    assert!(empty.body.contains("No durable groups in this project."), "{}", empty.body);
    assert!(empty.body.contains(&s.state.node.to_string()), "the page names the node whose members it shows");

    // agent-1 (an agent: with a clientId its session is persistent) joins group "workers".
    let mut w1 = s.connect().await;
    w1.auth_session("dev-token-agent", Some("w1"), false).await;
    w1.send(frame! {"type" => "subscribe", "topic" => TASKS, "loadBalance" => true, "loadBalanceGroup" => "workers"})
        .await;
    w1.expect("subscribed").await;
    let mut alice = s.auth("dev-token-alice").await;
    alice.publish_acked(TASKS, rmpv::Value::from(1)).await;
    alice.publish_acked(TASKS, rmpv::Value::from(2)).await;
    let m1 = w1.expect("message").await;
    w1.expect("message").await;

    let path = "/admin/durable?project=demo-project";
    let row = durable_row(&b, path, "workers", |r| r[2] == "<b>2</b>").await;
    assert!(row[0].contains(">demo/general/tasks</a>"), "the topic, linked to its live view: {row:?}");
    assert!(row[0].contains("/admin/live?project=demo-project&amp;topic=demo%2Fgeneral%2Ftasks"), "{row:?}");
    assert_eq!(row[3], "2", "both delivered, neither acked: in flight");
    assert!(row[4].contains("UTC)") && row[4].ends_with("</small>"), "the oldest unacked message's age: {row:?}");
    assert_eq!(row[5], "agent-1 (w1)", "the member connected here, with its clientId");

    // An ack ends one; the other stays in the backlog.
    w1.send(frame! {"type" => "ack", "msgId" => m1.str("msgId")}).await;
    let row = durable_row(&b, path, "workers", |r| r[2] == "<b>1</b>").await;
    assert_eq!(row[3], "1");

    // A second group on the topic: page size 1 puts it on its own page, in id order.
    let mut w2 = s.connect().await;
    w2.auth_session("dev-token-agent", Some("w2"), false).await;
    w2.send(frame! {"type" => "subscribe", "topic" => TASKS, "loadBalance" => true, "loadBalanceGroup" => "auditors"})
        .await;
    w2.expect("subscribed").await;
    let first = b.get(path).await;
    let row = group_row(&first.body, "auditors").expect("auditors sorts first");
    assert_eq!((row[2].as_str(), row[3].as_str(), row[4].as_str()), ("<b>0</b>", "0", "none"), "{row:?}");
    assert_eq!(row[5], "agent-1 (w2)");
    assert!(group_row(&first.body, "workers").is_none(), "one group per page");
    let next = next_link(&first.body).expect("a next page");
    let second = b.get(&next).await;
    assert!(group_row(&second.body, "workers").is_some(), "{}", second.body);
    assert!(group_row(&second.body, "auditors").is_none());
    assert!(second.body.contains(">First page</a>"));

    // The member leaves: its message is released, still pending, and nobody is here.
    drop(w1);
    let row = durable_row(&b, &next, "workers", |r| r[3] == "0").await;
    assert_eq!(row[2], "<b>1</b>", "a released message stays in the backlog");
    assert!(row[5].contains("none here"), "{row:?}");
    let bad = b.get("/admin/durable?project=not%20a%20slug").await;
    assert_eq!(bad.status, 400, "{bad:?}");
    drop(w2);
}

#[tokio::test]
async fn the_overview_lists_the_clusters_nodes_and_this_nodes_queues() {
    let s = TestServer::start().await;
    let now = skua_testkit::server::now_s();
    // Another node's registration in the (shared) presence backend. (A lapsed one would be
    // reaped by this node's liveness loop at any moment: its row is unit-tested in dashboard/overview.rs.)
    let other = skua_core::NodeId::parse("other-node").unwrap();
    s.state.presence.refresh_node(&other, now - 3, 60, true).await.unwrap();
    let b = Browser::sign_in(s.addr).await;
    let me = s.state.node.to_string();
    // This node registers itself as its liveness loop starts.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let page = loop {
        let page = b.get("/admin").await;
        assert_eq!(page.status, 200, "{page:?}");
        if page.body.contains(&format!("<td>{me} <small>(this node)</small></td>")) {
            break page;
        }
        assert!(tokio::time::Instant::now() < deadline, "this node never listed: {}", page.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let row = |id: &str| {
        let at = page.body.find(&format!("<td>{id}")).unwrap_or_else(|| panic!("no row of {id}: {}", page.body));
        let end = at + page.body[at..].find("</tr>").unwrap();
        page.body[at..end].to_owned()
    };
    let version = env!("CARGO_PKG_VERSION");
    let mine = row(&me);
    assert!(mine.contains("<td>up</td>") && mine.contains(&format!("<td>{version}</td>")), "{mine}");
    let o = row("other-node");
    assert!(o.contains("<td>up</td>") && o.contains(&format!("<td>{version}</td>")), "{o}");
    assert!(o.contains("s ago <small>("), "when it last refreshed: {o}");
    assert!(page.body.contains("<section id=\"nodes\" data-refresh=\"5\""), "the table refreshes itself");

    // The queue gauges, on the page and in the JSON its script refreshes them from.
    for label in ["Outbound frames queued", "Outbound bytes queued", "Bus deliveries waiting", "Triggers queued"] {
        assert!(page.body.contains(label), "{label}: {}", page.body);
    }
    let v: serde_json::Value = serde_json::from_str(&b.get("/admin/stats").await.body).unwrap();
    for k in ["outbound_frames", "outbound_bytes", "bus_queued"] {
        assert!(v[k].is_u64(), "{k}: {v}");
    }
    assert!(v["triggers_queued"].is_string(), "{v}");
}

#[tokio::test]
async fn topics_lobby_rooms_and_scope_state_are_edited_through_the_forms() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let demo = skua_core::ProjectId::parse("demo-project").unwrap();
    let topics = |s: &TestServer| -> Vec<(String, bool, bool)> {
        let reg = s.registry.load();
        let app = reg.project(&demo).unwrap().apps.iter().find(|a| a.slug == "demo").unwrap().clone();
        app.topics.iter().map(|(name, t)| (name.clone(), t.logged, t.history.is_some())).collect()
    };

    // The app's topic list: the edit form shows it; a topic added, one removed, one made logged;
    // a kept topic keeps its history.
    let page = b.get("/admin/apps/edit?project=demo-project&app=demo").await;
    assert!(page.body.contains("value=\"messages, status, events, results, tasks, feed\""), "{}", page.body);
    assert!(page.body.contains(
        "<label for=\"f-logged\">Logged topics</label><input id=\"f-logged\" name=\"logged\" value=\"tasks\""
    ));
    let form =
        "project=demo-project&app=demo&name=Demo&topics=messages%2C+tasks%2C+feed%2C+orders&logged=tasks%2C+orders";
    let r = b.post("/admin/apps/edit", form).await;
    assert_eq!(r.status, 303, "{r:?}");
    let want = [("feed", false, true), ("messages", false, false), ("orders", true, false), ("tasks", true, false)];
    assert_eq!(topics(&s), want.map(|(n, l, h)| (n.to_owned(), l, h)));
    // The API's validation, the typed value kept.
    let r = b.post("/admin/apps/edit", "project=demo-project&app=demo&name=Demo&topics=bad+topic%21&logged=").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("role=\"alert\"") && r.body.contains("bad"), "{}", r.body);
    assert!(r.body.contains("value=\"bad topic!\""), "the typed value is kept: {}", r.body);
    assert_eq!(topics(&s).len(), 4, "nothing changed");

    // One topic's own webhooks and history: the feed's history is shown, messages gets a trigger
    // of its own (which a publish then reaches) and a history.
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let page = b.get("/admin/apps/edit?project=demo-project&app=demo").await;
    assert!(page.body.contains("&amp;topic=feed\">feed</a> (history)</li>"), "{}", page.body);
    let page = b.get("/admin/apps/topic?project=demo-project&app=demo&topic=feed").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.body.contains("name=\"history_size\" value=\"1000\"")
            && page.body.contains("name=\"history_ttl\" value=\"600\"")
    );
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let form = format!(
        "project=demo-project&app=demo&topic=messages&on_subscribe=&on_publish={}&history_size=50&history_ttl=60",
        q(&receiver.url("/own"))
    );
    let r = b.post("/admin/apps/topic", &form).await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Topic messages saved.") && page.body.contains(&receiver.url("/own")), "{}", page.body);
    let history = |s: &TestServer| {
        let reg = s.registry.load();
        let app = reg.project(&demo).unwrap().apps.iter().find(|a| a.slug == "demo").unwrap().clone();
        app.topics["messages"].history.map(|h| (h.size, h.ttl_ms))
    };
    assert_eq!(history(&s), Some((50, 60_000)));
    let mut alice = s.auth("dev-token-alice").await;
    alice.publish_acked("demo/general/messages", "to the topic's hook".into()).await;
    let got = receiver.wait_for(1).await;
    assert_eq!(got[0].json()["topic"], "demo/general/messages", "{:?}", got[0]);
    // The API's checks (the typed values kept), a number that is none, an unknown topic.
    let bad = "project=demo-project&app=demo&topic=messages&on_publish=http%3A%2F%2F169.254.169.254%2Fx&history_size=50&history_ttl=60";
    let r = b.post("/admin/apps/topic", bad).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.body.contains("link-local or cloud metadata") && r.body.contains("value=\"http://169.254.169.254/x\""),
        "{}",
        r.body
    );
    let r = b
        .post("/admin/apps/topic", "project=demo-project&app=demo&topic=messages&history_size=many&history_ttl=60")
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("whole numbers") && r.body.contains("value=\"many\""), "{}", r.body);
    let r =
        b.post("/admin/apps/topic", "project=demo-project&app=demo&topic=messages&history_size=0&history_ttl=60").await;
    assert_eq!(r.status, 400, "the API's own limit: {r:?}");
    assert_eq!(history(&s), Some((50, 60_000)), "nothing changed");
    assert_eq!(b.get("/admin/apps/topic?project=demo-project&app=demo&topic=nope").await.status, 404);
    // Both emptied: no own webhook, no history.
    let r = b
        .post(
            "/admin/apps/topic",
            "project=demo-project&app=demo&topic=messages&on_publish=&history_size=&history_ttl=",
        )
        .await;
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(history(&s), None);

    // A lobby's rooms.
    let r = b.post("/admin/lobbies", "project=demo-project&app=demo&lobby=hall&rooms=general").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get("/admin/lobbies/edit?project=demo-project&lobby=hall").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.body
            .contains("<label for=\"f-rooms\">Rooms</label><input id=\"f-rooms\" name=\"rooms\" value=\"general\"")
    );
    let r = b.post("/admin/lobbies/edit", "project=demo-project&lobby=hall&rooms=general%2C+random").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(
        page.body.contains("Lobby hall saved: 2 rooms.") && page.body.contains("<td>general, random</td>"),
        "{}",
        page.body
    );
    let r = b.post("/admin/lobbies/edit", "project=demo-project&lobby=hall&rooms=general%2C+nope").await;
    assert!(r.status == 400 || r.status == 404, "an unknown room: {r:?}");
    assert!(r.body.contains("nope") && r.body.contains("value=\"general, nope\""), "{}", r.body);
    let r = b.post("/admin/lobbies/edit", "project=demo-project&lobby=nope&rooms=general").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(b.get("/admin/lobbies/edit?project=demo-project&lobby=nope").await.status, 404);

    // A scope's state: deactivated, then active again.
    let r = b.post("/admin/scopes", "project=demo-project&scope=acme").await;
    assert_eq!(r.status, 303, "{r:?}");
    let r = b.post("/admin/scopes/state", "project=demo-project&scope=acme&active=0").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Scope acme deactivated"), "{}", page.body);
    assert!(page.body.contains("<strong>deactivated</strong>") && page.body.contains(">Activate acme</button>"));
    let r = b.post("/admin/scopes/state", "project=demo-project&scope=acme&active=1").await;
    let page = b.get(r.header("location").unwrap()).await;
    assert!(
        page.body.contains("Scope acme activated.") && page.body.contains(">Deactivate acme</button>"),
        "{}",
        page.body
    );
    let r = b.post("/admin/scopes/state", "project=demo-project&scope=nope&active=1").await;
    assert_eq!(r.status, 404, "{r:?}");
}

#[tokio::test]
async fn a_projects_limits_are_viewed_and_edited_with_the_apis_checks() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let demo = skua_core::ProjectId::parse("demo-project").unwrap();
    let limits = |s: &TestServer| s.registry.load().project(&demo).unwrap().limits.clone();
    let page = b.get("/admin/projects").await;
    assert!(
        page.body
            .contains("href=\"/admin/projects/edit?project=demo-project\" aria-label=\"Edit project demo-project\""),
        "{}",
        page.body
    );
    let page = b.get("/admin/projects/edit?project=demo-project").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("<label for=\"f-max_connections\">Max connections</label>"), "{}", page.body);
    let form =
        "project=demo-project&name=Demo&max_connections=50&monthly_message_quota=&rate_limit=20&max_message_size=4096";
    let r = b.post("/admin/projects/edit", form).await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Project demo-project saved."), "{}", page.body);
    assert!(page.body.contains("name=\"max_connections\" value=\"50\""), "{}", page.body);
    assert!(page.body.contains("name=\"monthly_message_quota\" value=\"\""), "{}", page.body);
    let want = skua_core::registry::ProjectLimits {
        max_connections: Some(50),
        rate_limit: Some(20),
        max_message_size: Some(4096),
        monthly_message_quota: None,
    };
    assert_eq!(limits(&s), want, "the node applies the new limits");
    let page = b.get("/admin/projects").await;
    assert!(page.body.contains("<td>50 connections, 20/s per connection, 4096 bytes a message</td>"), "{}", page.body);
    // The API's checks (the typed values kept), a number that is none, an unknown project.
    let r = b.post("/admin/projects/edit", "project=demo-project&name=Demo&rate_limit=0").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("limits.rate_limit must be at least 1"), "{}", r.body);
    assert!(r.body.contains("name=\"rate_limit\" value=\"0\""), "the typed value is kept: {}", r.body);
    let r = b.post("/admin/projects/edit", "project=demo-project&name=Demo&max_message_size=99999999").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("limits.max_message_size must be 1..="), "{}", r.body);
    let r = b.post("/admin/projects/edit", "project=demo-project&name=Demo&max_connections=lots").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("limits.max_connections must be a whole number"), "{}", r.body);
    assert_eq!(limits(&s), want, "nothing refused changed");
    let r = b.post("/admin/projects/edit", "project=nope&name=x").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(b.get("/admin/projects/edit?project=nope").await.status, 404);
    // All emptied: the node's settings again.
    let r = b.post("/admin/projects/edit", "project=demo-project&name=Demo&max_connections=&rate_limit=").await;
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(limits(&s), skua_core::registry::ProjectLimits::default());
    // A new JWT secret (never shown back), kept when the field is left empty, then removed.
    let secret = |s: &TestServer| s.registry.load().project(&demo).unwrap().jwt_secret.clone();
    let r = b
        .post("/admin/projects/edit", "project=demo-project&name=Demo&jwt_secret=a-new-secret-of-32-bytes-or-more!")
        .await;
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(secret(&s).as_deref(), Some("a-new-secret-of-32-bytes-or-more!"));
    let page = b.get("/admin/projects/edit?project=demo-project").await;
    assert!(
        page.body.contains("JWT secret: set (never shown)") && !page.body.contains("a-new-secret"),
        "{}",
        page.body
    );
    assert_eq!(b.post("/admin/projects/edit", "project=demo-project&name=Demo&jwt_secret=").await.status, 303);
    assert!(secret(&s).is_some(), "an empty field keeps it");
    let r = b.post("/admin/projects/edit", "project=demo-project&name=Demo&remove_jwt_secret=1").await;
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(secret(&s), None);
}

#[tokio::test]
async fn an_actor_and_a_scope_name_are_edited_through_the_forms() {
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let actor = |s: &TestServer| {
        let reg = s.registry.load();
        let a = reg.actor("alice").unwrap();
        (a.active, a.scope.as_ref().map(|x| x.slug.to_string()))
    };
    assert_eq!(b.post("/admin/scopes", "project=demo-project&scope=acme&name=Acme").await.status, 303);
    let page = b.get("/admin/actors?project=demo-project").await;
    assert!(page.body.contains("aria-label=\"Edit actor alice\""), "{}", page.body);
    let page = b.get("/admin/actors/edit?project=demo-project&actor=alice").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("<option value=\"\" selected>none</option>"), "{}", page.body);
    let scope_id = {
        let at = page.body.find("\">acme (Acme)</option>").expect("the scope is offered");
        let start = page.body[..at].rfind("value=\"").unwrap() + 7;
        page.body[start..at].to_owned()
    };
    // Deactivated (the box unticked): her connection closes, as through the API.
    let mut alice = s.auth("dev-token-alice").await;
    let r = b.post("/admin/actors/edit", "project=demo-project&actor=alice&name=Alice+A&scope=").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Actor alice saved.") && page.body.contains("value=\"Alice A\""), "{}", page.body);
    assert!(!page.body.contains("name=\"active\" value=\"1\" checked"), "{}", page.body);
    assert_eq!(alice.expect_close().await.0, 4001);
    assert_eq!(actor(&s), (false, None));
    // Active again and moved into the scope.
    let r = b
        .post("/admin/actors/edit", &format!("project=demo-project&actor=alice&name=Alice+A&active=1&scope={scope_id}"))
        .await;
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(actor(&s), (true, Some("acme".to_owned())));
    let page = b.get("/admin/actors?project=demo-project").await;
    assert!(page.body.contains("<td>Alice A</td><td>active</td><td>acme</td>"), "{}", page.body);
    // The API's checks: a name too long, an unknown scope (nothing changed); an actor of another
    // project is not found there.
    let long = "x".repeat(1000);
    let r = b.post("/admin/actors/edit", &format!("project=demo-project&actor=alice&name={long}&active=1")).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("name is longer than"), "{}", r.body);
    let r = b.post("/admin/actors/edit", "project=demo-project&actor=alice&name=A&active=1&scope=nope").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(r.body.contains("scope &quot;nope&quot; not found"), "{}", r.body);
    assert_eq!(actor(&s), (true, Some("acme".to_owned())));
    assert_eq!(b.post("/admin/projects", "id=other").await.status, 303);
    assert_eq!(b.get("/admin/actors/edit?project=other&actor=alice").await.status, 404);
    assert_eq!(b.post("/admin/actors/edit", "project=other&actor=alice&name=x&active=1").await.status, 404);
    // A new access token: shown once, the old one refused.
    let r = b.post("/admin/actors/rotate", "project=demo-project&actor=alice").await;
    assert_eq!(r.status, 200, "{r:?}");
    let at = r.body.find("New access token for alice (shown once): ").expect("the token is shown") + 41;
    let token: String = r.body[at..].chars().take_while(|c| !c.is_whitespace() && *c != '<').collect();
    assert!(token.starts_with("at_live_"), "{token}");
    let mut c = s.connect().await;
    assert_eq!(c.auth("dev-token-alice", Some(2)).await.str("error"), "access_denied", "the replaced token");
    let _fresh = s.auth(&token).await;

    // A scope's name (its slug stays).
    let page = b.get("/admin/scopes?project=demo-project").await;
    assert!(page.body.contains("aria-label=\"Edit scope acme\""), "{}", page.body);
    assert_eq!(b.get("/admin/scopes/edit?project=demo-project&scope=acme").await.status, 200);
    let r = b.post("/admin/scopes/edit", "project=demo-project&scope=acme&name=Acme+Two").await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("Scope acme saved.") && page.body.contains("<td>Acme Two</td>"), "{}", page.body);
    let r = b.post("/admin/scopes/edit", &format!("project=demo-project&scope=acme&name={long}")).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("name is longer than") && r.body.contains(&format!("value=\"{long}\"")));
    assert_eq!(b.post("/admin/scopes/edit", "project=demo-project&scope=nope&name=x").await.status, 404);
}

#[tokio::test]
async fn webhook_headers_and_timeouts_are_edited_on_the_app_and_topic_forms() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let s = TestServer::start().await;
    let b = Browser::sign_in(s.addr).await;
    let edit = "/admin/apps/edit?project=demo-project&app=demo";
    let url = receiver.url("/t");
    let form = |extra: &str| format!("project=demo-project&app=demo&name=Demo&trigger_webhook={}{extra}", q(&url));
    let r = b
        .post(
            "/admin/apps/edit",
            &form("&trigger_webhook_headers=X-Team%3A+blue%0AX-Env%3A+test&trigger_webhook_timeout_ms=2500"),
        )
        .await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains(">X-Env: test\nX-Team: blue</textarea>"), "{}", page.body);
    assert!(page.body.contains("name=\"trigger_webhook_timeout_ms\" value=\"2500\""), "{}", page.body);
    let mut alice = s.auth("dev-token-alice").await;
    alice.publish_acked("demo/general/messages", "with headers".into()).await;
    let got = receiver.wait_for(1).await;
    assert_eq!((got[0].header("x-team"), got[0].header("x-env")), (Some("blue"), Some("test")), "{:?}", got[0]);
    // The API's checks (the typed values kept): a reserved header, a timeout above the maximum;
    // and the form's own: a line that is no header, a timeout that is no number.
    for (extra, says) in [
        ("&trigger_webhook_headers=Content-Type%3A+text%2Fplain", "may not be configured"),
        ("&trigger_webhook_timeout_ms=99000", "above the trigger webhook maximum"),
        ("&trigger_webhook_headers=just+words", "has no &#39;:&#39;"),
        ("&trigger_webhook_timeout_ms=soon", "must be a whole number of milliseconds"),
    ] {
        let r = b.post("/admin/apps/edit", &form(extra)).await;
        assert_eq!(r.status, 400, "{extra}: {r:?}");
        assert!(r.body.contains("role=\"alert\"") && r.body.contains(says), "{extra}: {}", r.body);
    }
    let r = b.post("/admin/apps/edit", &form("&trigger_webhook_timeout_ms=soon")).await;
    assert!(r.body.contains("name=\"trigger_webhook_timeout_ms\" value=\"soon\""), "{}", r.body);
    let page = b.get(edit).await;
    assert!(page.body.contains("name=\"trigger_webhook_timeout_ms\" value=\"2500\""), "nothing refused changed");
    // Emptied: no headers, the default timeout.
    let r = b.post("/admin/apps/edit", &form("&trigger_webhook_headers=&trigger_webhook_timeout_ms=")).await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(edit).await;
    assert!(page.body.contains("name=\"trigger_webhook_headers\" rows=\"3\" aria-describedby=\"f-trigger_webhook_headers-hint\"></textarea>"), "{}", page.body);
    assert!(page.body.contains("name=\"trigger_webhook_timeout_ms\" value=\"\""), "{}", page.body);

    // A topic's own webhook with its headers and timeout.
    let own = receiver.url("/own");
    let topic = format!(
        "project=demo-project&app=demo&topic=messages&on_publish={}&on_publish_headers=X-Topic%3A+messages&on_publish_timeout_ms=1500&history_size=&history_ttl=",
        q(&own)
    );
    let r = b.post("/admin/apps/topic", &topic).await;
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.get(r.header("location").unwrap()).await;
    assert!(page.body.contains(">X-Topic: messages</textarea>"), "{}", page.body);
    assert!(page.body.contains("name=\"on_publish_timeout_ms\" value=\"1500\""), "{}", page.body);
    alice.publish_acked("demo/general/messages", "to the topic's hook".into()).await;
    let got = receiver.wait_for(2).await;
    let mine = got.iter().find(|r| r.path == "/own").expect("the topic's own hook was called");
    assert_eq!(mine.header("x-topic"), Some("messages"), "{mine:?}");
    let r = b.post("/admin/apps/topic", &topic.replace("1500", "31000")).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("topics.messages.webhooks.on_publish.timeout_ms") && r.body.contains("value=\"31000\""));
}

/// The value of the search box of a page.
fn search_box(body: &str) -> &str {
    let needle = "<input type=\"search\" id=\"q\" name=\"q\" value=\"";
    let at = body.find(needle).expect("a search box") + needle.len();
    &body[at..at + body[at..].find('"').unwrap()]
}

#[tokio::test]
async fn every_list_page_is_searched_ignoring_case_before_paging() {
    let s = TestServer::builder().settings(|c| c.control.dashboard_page_size = Some(1)).spawn().await;
    let b = Browser::sign_in(s.addr).await;
    // Rows to find ("red") and rows not to find, on every list page.
    for (path, form) in [
        ("/admin/projects", "id=red-project"),
        ("/admin/apps", "project=demo-project&slug=red-app&topics=chat"),
        ("/admin/rooms", "project=demo-project&app=demo&room=red-1&name=Red+one"),
        ("/admin/rooms", "project=demo-project&app=demo&room=blue-1"),
        ("/admin/rooms", "project=demo-project&app=demo&room=red-2"),
        ("/admin/actors", "project=demo-project&id=red-bot&actor_type=agent"),
        ("/admin/grants", "project=demo-project&app=demo&room=red-1&actor_id=alice&permission=subscribe&topics=status"),
        ("/admin/grants", "project=demo-project&app=demo&room=red-1&actor_id=bob&permission=publish&topics=feed"),
        ("/admin/lobbies", "project=demo-project&app=demo&lobby=red-lobby&rooms=red-1"),
        ("/admin/scopes", "project=demo-project&scope=red-team&name=Red+Team"),
        ("/admin/scopes", "project=demo-project&scope=blue-team&name=Blue"),
        ("/admin/api-keys", "project=demo-project&name=red-deploy"),
        ("/admin/api-keys", "project=demo-project&name=blue-ci"),
    ] {
        let r = b.post(path, form).await;
        assert!(r.status == 303 || r.status == 200, "{path} {form}: {r:?}");
        assert!(!r.body.contains("role=\"alert\""), "{path} {form}: {}", r.body);
    }
    let keys = b.get("/admin/api-keys?project=demo-project").await;
    let end = keys.body.find("</code></td><td>red-deploy</td>").expect("the key's row");
    let key_id = &keys.body[keys.body[..end].rfind("<code>").unwrap() + 6..end];

    let red_key = format!("/admin/api-keys?project=demo-project&q={}", key_id[..8].to_uppercase());
    let cases: [(&str, &[&str], &[&str]); 12] = [
        ("/admin/projects?q=RED", &[">red-project</a>"], &[">demo-project</a>"]),
        ("/admin/apps?project=demo-project&q=Red", &[">red-app</a>"], &[">demo</a>"]),
        ("/admin/apps?project=demo-project&q=TASKS", &[">demo</a>"], &[">red-app</a>"]),
        (
            "/admin/rooms?project=demo-project&app=demo&q=RED+ONE",
            &["<td>red-1</td>"],
            &["<td>red-2</td>", "<td>blue-1</td>"],
        ),
        ("/admin/actors?project=demo-project&q=red", &["<td>red-bot ("], &["<td>alice (", "<td>agent-1 ("]),
        ("/admin/actors?project=demo-project&q=Orchestrator", &["<td>orch-1 ("], &["<td>red-bot (", "<td>alice ("]),
        ("/admin/grants?project=demo-project&app=demo&room=red-1&q=ALICE", &["<td>alice</td>"], &["<td>bob</td>"]),
        ("/admin/grants?project=demo-project&app=demo&room=red-1&q=feed", &["<td>bob</td>"], &["<td>alice</td>"]),
        ("/admin/lobbies?project=demo-project&q=RANDOM", &["<td>online ("], &["<td>red-lobby ("]),
        ("/admin/scopes?project=demo-project&q=red+team", &["<td>red-team ("], &["<td>blue-team ("]),
        ("/admin/api-keys?project=demo-project&q=DEPLOY", &["<td>red-deploy</td>"], &["<td>blue-ci</td>"]),
        (&red_key, &["<td>red-deploy</td>"], &["<td>blue-ci</td>"]),
    ];
    for (path, found, not_found) in cases {
        let r = b.get(path).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        for f in found {
            assert!(r.body.contains(f), "{path} finds {f}: {}", r.body);
        }
        for n in not_found {
            assert!(!r.body.contains(n), "{path} does not find {n}: {}", r.body);
        }
        let term = path.split("q=").nth(1).unwrap().replace('+', " ");
        assert_eq!(search_box(&r.body), term, "{path}: the term stays in the box");
        assert!(r.body.contains("matching “"), "{path}: the caption says it is a search");
        if path.contains("project=") {
            assert!(r.body.contains("<input type=\"hidden\" name=\"project\" value=\"demo-project\">"), "{path}");
        }
        if path.contains("room=red-1") {
            assert!(r.body.contains("<input type=\"hidden\" name=\"room\" value=\"red-1\">"), "{path}: the room kept");
        }
    }

    // Nothing found: the "no match" line, on every page.
    for path in [
        "/admin/projects",
        "/admin/apps?project=demo-project",
        "/admin/rooms?project=demo-project&app=demo",
        "/admin/actors?project=demo-project",
        "/admin/grants?project=demo-project&app=demo&room=red-1",
        "/admin/lobbies?project=demo-project",
        "/admin/scopes?project=demo-project",
        "/admin/api-keys?project=demo-project",
    ] {
        let sep = if path.contains('?') { '&' } else { '?' };
        let r = b.get(&format!("{path}{sep}q=zz-nothing")).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert!(r.body.contains("No match for “zz-nothing” in "), "{path}: {}", r.body);
        assert!(!r.body.contains("<table"), "{path}: no rows: {}", r.body);
        let plain = b.get(path).await;
        assert!(plain.body.contains("<table"), "{path} without a term lists its rows");
        assert_eq!(search_box(&plain.body), "");
    }

    // Paged lists are searched before paging: one room a page, only the matching ones, the
    // term carried by the "next" link.
    let first = b.get("/admin/rooms?project=demo-project&app=demo&q=red").await;
    assert!(first.body.contains("<td>red-1</td>") && !first.body.contains("<td>blue-1</td>"), "{}", first.body);
    let next = next_link(&first.body).expect("a next page of matches");
    assert!(next.contains("&q=red"), "{next}");
    let second = b.get(&next).await;
    assert!(second.body.contains("<td>red-2</td>") && !second.body.contains("<td>red-1</td>"), "{}", second.body);
    assert!(next_link(&second.body).is_none(), "two matches, two pages: {}", second.body);
    let actors = b.get("/admin/actors?project=demo-project&q=red-").await;
    assert!(actors.body.contains("<td>red-bot (") && next_link(&actors.body).is_none(), "{}", actors.body);

    // The term is escaped wherever it is shown.
    let evil = "<script>alert(1)</script>\"'&";
    let r = b.get(&format!("/admin/rooms?project=demo-project&app=demo&q={}", q(evil))).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(!r.body.contains("<script>alert"), "{}", r.body);
    assert_eq!(search_box(&r.body), "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;");
    assert!(
        r.body.contains("No match for “&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;” in Rooms."),
        "{}",
        r.body
    );

    // At most dashboard_search_max_chars (200) characters, not bytes; longer is refused 400.
    let r = b.get(&format!("/admin/actors?project=demo-project&q={}", q(&"é".repeat(200)))).await;
    assert_eq!(r.status, 200, "200 two-byte characters are within the bound: {r:?}");
    let r = b.get(&format!("/admin/actors?project=demo-project&q={}", "x".repeat(201))).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.body.contains("role=\"alert\"") && r.body.contains("Search term too long: 201 characters, at most 200."),
        "{}",
        r.body
    );
    assert_eq!(search_box(&r.body), "x".repeat(200), "the box holds the term cut to the bound");
    assert!(r.body.contains("<input type=\"hidden\" name=\"project\" value=\"demo-project\">"), "{}", r.body);
    assert!(!r.body.contains("<td>alice ("), "no list under the refusal");
}

/// Issue 33, item 11: the dashboard's answers carry nosniff and a referrer policy (HSTS only
/// with TLS).
#[tokio::test]
async fn dashboard_answers_carry_nosniff_and_a_referrer_policy() {
    let s = TestServer::start().await;
    for path in ["/admin/login", "/admin", "/admin/assets/app.css", "/admin/nope"] {
        let r = http(s.addr, "GET", path, &[], "").await;
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{path}: {r:?}");
        assert_eq!(r.header("referrer-policy"), Some("same-origin"), "{path}: {r:?}");
        assert_eq!(r.header("strict-transport-security"), None, "no TLS, no HSTS: {path}");
    }
    // The policy keeps the Origin header same-origin forms send: signing in still works.
    Browser::sign_in(s.addr).await;
}

/// Issue 33, item 11: gRPC and the dashboard's sign-in share one table of failed admin keys,
/// so an address gets `admin_key_max_failures` tries in all, not that many per door.
#[tokio::test]
async fn grpc_and_the_dashboard_share_the_admin_key_failures() {
    use skua_control::pb;
    let s = TestServer::builder()
        .grpc()
        .settings(|s| {
            s.control.admin_key_max_failures = Some(3);
            s.control.admin_key_backoff_max = Some("1m".into());
        })
        .spawn()
        .await;
    let mut wrong = skua_testkit::control::connect(s.grpc_addr.unwrap(), Some("not-the-key-at-all")).await;
    for _ in 0..2 {
        let r = wrong.list_projects(pb::ListProjectsRequest {}).await;
        assert_eq!(r.expect_err("a wrong key").code(), tonic::Code::Unauthenticated);
    }
    let r = http(s.addr, "POST", "/admin/login", &[], "admin_key=not-the-key-either").await;
    assert_eq!(r.status, 401, "{r:?}");
    // Three failures in all: blocked on both doors, even with the right key.
    let r = http(s.addr, "POST", "/admin/login", &[], &format!("admin_key={ADMIN_KEY}")).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.header("retry-after").is_some_and(|v| v.parse::<u64>().is_ok_and(|n| n >= 1)), "{r:?}");
    let mut right = skua_testkit::control::connect(s.grpc_addr.unwrap(), Some(ADMIN_KEY)).await;
    let r = right.list_projects(pb::ListProjectsRequest {}).await;
    assert_eq!(r.expect_err("blocked").code(), tonic::Code::ResourceExhausted);
}

/// docs/dashboard.md: at most `dashboard_max_sessions` sessions; a sign-in beyond it ends the
/// oldest. A session lasts `dashboard_session_ttl`, not longer.
#[tokio::test]
async fn sessions_are_capped_ending_the_oldest_and_expire_after_their_ttl() {
    let s = TestServer::builder().settings(|s| s.control.dashboard_max_sessions = Some(2)).spawn().await;
    let first = Browser::sign_in(s.addr).await;
    let second = Browser::sign_in(s.addr).await;
    assert_eq!(first.get("/admin").await.status, 200);
    let third = Browser::sign_in(s.addr).await;
    assert_eq!(first.get("/admin").await.status, 303, "the oldest session was ended");
    assert_eq!(second.get("/admin").await.status, 200);
    assert_eq!(third.get("/admin").await.status, 200);

    let s = TestServer::builder().settings(|s| s.control.dashboard_session_ttl = Some("1s".into())).spawn().await;
    let started = std::time::Instant::now();
    let b = Browser::sign_in(s.addr).await;
    let d = skua_testkit::control::Deadline::new("the session expires", Duration::from_secs(5));
    while b.get("/admin").await.status == 200 {
        d.tick().await;
    }
    assert!(started.elapsed() >= Duration::from_secs(1), "ended after {:?}, before its ttl", started.elapsed());
    assert_eq!(b.get("/admin").await.status, 303);
}

/// Opens a live view of `demo/general/messages`; returns the answer's status and the view id.
async fn open_view(b: &Browser) -> (u16, Option<String>) {
    let r = b.post("/admin/live", "project=demo-project&topic=demo%2Fgeneral%2Fmessages").await;
    let view = r.header("location").and_then(|l| l.strip_prefix("/admin/live?view=")).map(str::to_owned);
    (r.status, view)
}

/// docs/dashboard.md: at most `dashboard_max_live_views` views per node (429 beyond, naming the
/// setting); a view nobody polls for `dashboard_live_idle` is closed, which makes room; a view
/// keeps the last `dashboard_live_buffer` messages.
#[tokio::test]
async fn live_views_are_capped_closed_when_idle_and_keep_the_last_messages() {
    let s = TestServer::builder()
        .settings(|s| {
            s.control.dashboard_max_live_views = Some(2);
            s.control.dashboard_live_buffer = Some(3);
            s.control.dashboard_live_idle = Some("1s".into());
            s.control.dashboard_sample_interval = Some("100ms".into());
        })
        .spawn()
        .await;
    let b = Browser::sign_in(s.addr).await;
    let (status, one) = open_view(&b).await;
    assert_eq!(status, 303);
    let one = one.unwrap();
    assert_eq!(open_view(&b).await.0, 303);
    let r = b.post("/admin/live", "project=demo-project&topic=demo%2Fgeneral%2Fmessages").await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.body.contains("dashboard_max_live_views"), "{}", r.body);

    // The buffer: five messages, each seen by the view, leave the last three.
    let mut alice = s.auth("dev-token-alice").await;
    for n in 1..=5 {
        alice.publish_acked("demo/general/messages", frame! {"n" => format!("m{n}")}).await;
        live_message(&b, &one, &format!("m{n}")).await;
    }
    let r = b.get(&format!("/admin/live/poll?view={one}&after=0")).await;
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let texts: Vec<&str> = v["messages"].as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert_eq!(texts.len(), 3, "{texts:?}");
    for (t, n) in texts.iter().zip(3..=5) {
        assert!(t.contains(&format!("m{n}")), "{texts:?}");
    }

    // Left alone, both views close after the idle time, and a new one may be opened. The view
    // never polled since it opened (the second) closes first and makes room for a third; `one`,
    // polled last before the third opened, closes before the third does, so once a fourth may
    // be opened too, `one` is closed (polling `one` meanwhile would keep it open).
    let d = skua_testkit::control::Deadline::new("an idle view closes and makes room", Duration::from_secs(10));
    while open_view(&b).await.0 == 429 {
        d.tick().await;
    }
    let d = skua_testkit::control::Deadline::new("the other idle view closes too", Duration::from_secs(10));
    while open_view(&b).await.0 == 429 {
        d.tick().await;
    }
    let r = b.get(&format!("/admin/live/poll?view={one}&after=0")).await;
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["closed"], true, "{v}");
}
