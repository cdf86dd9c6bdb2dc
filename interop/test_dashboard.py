"""The admin dashboard (issue 20) in a real browser: Debian's chromium, headless, driven through
chromium-driver by selenium, against a real `skua serve --dev`. Signs in with the dev admin key,
creates an app and two rooms through the forms, finds one with the rooms page's search box (typed,
Enter), opens the live topic view, publishes from the NoLag
Python SDK and sees the message appear, sees the SDK client in the room's presence view; also checks that a page without the session goes to the
sign-in form, and the phone layout. A second test revokes a grant on the page and sees the SDK
client's subscription end, sets an app's trigger webhook on its edit page and retries the failed
trigger from the dead letters page, then finds the retries in the recent deliveries. A third has an
SDK agent group with an unacked message and finds its backlog on the durable delivery page. A
fourth reads the overview's node list, then edits through the pages a project's limits, an actor,
a scope's name, a lobby's rooms, an app's trigger webhook (headers, timeout) and a topic's own
webhook and history, and checks each change with `skua admin`.

With SKUA_DASHBOARD_SCREENSHOTS=DIR (e.g. docs/img) it writes the screenshots the README and
docs/dashboard.md show. Without chromium or chromium-driver the test is skipped, loudly; under
CI=true it fails instead (scripts/test.sh installs both)."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest

import helpers
from helpers import Recorder, connect, emit_ack

DEV_ADMIN_KEY = "skua-dev-admin-key"
WAIT_S = 20
PHONE = (390, 844)
DESKTOP = (1280, 900)


def browser_paths() -> tuple[str, str]:
    """chromium and chromedriver, or a loud skip (a failure under CI=true)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    why = (
        "the dashboard browser test needs Debian's chromium and chromium-driver "
        f"(found chromium={chromium}, chromedriver={driver}): apt-get install chromium chromium-driver"
    )
    helpers.skip_loudly(f"interop/test_dashboard.py: {why}")
    raise AssertionError("unreachable: skip_loudly skips or fails")


def start_browser():
    chromium, driver = browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={DESKTOP[0]},{DESKTOP[1]}", "--hide-scrollbars", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver), options=opts)


def shoot(browser, name: str) -> None:
    """Writes docs' screenshot `name`.png when SKUA_DASHBOARD_SCREENSHOTS names a directory."""
    out = os.environ.get("SKUA_DASHBOARD_SCREENSHOTS")
    if not out:
        return
    path = Path(out)
    if not path.is_absolute():
        path = Path(__file__).resolve().parent.parent / path
    path.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(path / f"{name}.png")), f"screenshot {name} not written"


def admin_url(server) -> str:
    """The /admin URL the --dev banner prints (after the listening line: waited for)."""
    deadline = time.monotonic() + 10
    line = None
    while line is None and time.monotonic() < deadline:
        line = next((l for l in server.stdout if "admin dashboard:" in l), None)
        if line is None:
            time.sleep(0.02)
    assert line, f"the --dev banner prints the /admin URL:\n{server.text(server.stdout)}"
    m = re.search(r"(http://\S+/admin)\b", line)
    assert m and DEV_ADMIN_KEY in line, line
    return m.group(1)


@pytest.fixture
def browser():
    b = start_browser()
    yield b
    b.quit()


def wait_for(browser, what, timeout: float = WAIT_S):
    """`what(browser)` once truthy; elements replaced meanwhile (the pages' refreshes) are retried."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, ignored_exceptions=[StaleElementReferenceException]).until(what)


def submit_form(browser, action: str, fields: dict[str, str]) -> None:
    """Fills the visible fields of the POST form to `action` by their labels' inputs, submits, and
    waits for the next page (so that a notice read afterwards is the new page's)."""
    from selenium.webdriver.common.by import By

    form = browser.find_element(By.CSS_SELECTOR, f"form[method=post][action='{action}']")
    for name, value in fields.items():
        el = form.find_element(By.NAME, name)
        el.clear()
        el.send_keys(value)
    click_and_leave(browser, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))


def click_and_leave(browser, button) -> None:
    """Clicks `button` and waits until its page is gone (the form's answer loaded)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def gone(_) -> bool:
        try:
            button.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            # chromedriver, asked about an element while its document is being replaced, may
            # answer with a generic inspector error instead of a stale reference (seen in CI:
            # "Node with given id does not belong to the document"): the page is going.
            if "does not belong to the document" in str(e) or "No node with given id" in str(e):
                return True
            raise
        return False

    button.click()
    wait_for(browser, gone)


def notice(browser) -> str:
    from selenium.webdriver.common.by import By

    return wait_for(browser, lambda b: b.find_element(By.CSS_SELECTOR, ".notice")).text


@pytest.mark.timeout(180)
async def test_dashboard_in_chromium(skua_factory, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    # Samples every 500 ms, so the overview's chart has a line within the test.
    skua = skua_factory("--dashboard-sample-interval", "500ms")

    url = admin_url(skua)
    base = url.removesuffix("/admin")

    def sign_in_and_build() -> tuple[str, str]:
        # Without the session every page goes to the sign-in form.
        browser.get(f"{url}/apps")
        wait_for(browser, lambda b: b.current_url.endswith("/admin/login"))
        label = browser.find_element(By.CSS_SELECTOR, "label[for=admin_key]")
        assert label.text == "Admin key"
        shoot(browser, "dashboard-login")
        browser.find_element(By.ID, "admin_key").send_keys("wrong-key-wrong-key")
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        assert "Invalid admin key." in notice(browser)
        browser.find_element(By.ID, "admin_key").send_keys(DEV_ADMIN_KEY)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "h1").text == "Overview")
        cookie = browser.get_cookie("skua_admin")
        assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie
        node = browser.find_element(By.ID, "v-node").text
        assert node.startswith(("node-", "interop-")), node

        # An app with two topics, through the form; then its validation message.
        slug = f"shop-{uuid.uuid4().hex[:6]}"
        browser.get(f"{url}/apps?project=demo-project")
        submit_form(browser, "/admin/apps", {"slug": "bad slug"})
        assert "is invalid" in notice(browser)
        submit_form(browser, "/admin/apps", {"slug": slug, "name": "Shop", "topics": "orders, chat"})
        assert notice(browser) == f"App {slug} created."
        shoot(browser, "dashboard-apps")
        # A room in it: the app's link leads to its rooms.
        browser.find_element(By.LINK_TEXT, slug).click()
        wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "h1").text == "Rooms")
        submit_form(browser, "/admin/rooms", {"room": "lobby", "name": "Lobby"})
        assert notice(browser) == "Room lobby created."
        submit_form(browser, "/admin/rooms", {"room": "dock", "name": "Dock"})
        assert notice(browser) == "Room dock created."
        # The search box, from the keyboard: type, Enter; only the matching room is listed,
        # and the app stays selected.
        box = browser.find_element(By.ID, "q")
        assert browser.find_element(By.CSS_SELECTOR, "label[for=q]").text == "Search rooms"
        box.send_keys("LOB", Keys.ENTER)
        wait_for(browser, lambda b: "q=LOB" in b.current_url)
        assert f"app={slug}" in browser.current_url, browser.current_url
        assert browser.find_element(By.ID, "q").get_attribute("value") == "LOB"
        cells = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "table tbody tr td:first-child")]
        assert cells == ["lobby"], cells
        assert "Rooms matching" in browser.find_element(By.TAG_NAME, "caption").text
        # The room's Live link opens the live view on its first topic; watch it.
        browser.find_element(By.LINK_TEXT, "Live").click()
        wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "h1").text == "Live topic")
        topic = browser.find_element(By.ID, "f-topic").get_attribute("value")
        assert topic == f"{slug}/lobby/orders", topic
        browser.find_element(By.XPATH, "//button[text()='Watch']").click()
        wait_for(browser, lambda b: b.find_element(By.ID, "live-messages"))
        wait_for(browser, lambda b: b.find_element(By.ID, "live-status").text == "watching")
        return slug, topic

    slug, topic = await asyncio.to_thread(sign_in_and_build)

    # A client of the demo project publishes with the real SDK; the live view shows it.
    alice = await connect(skua.url, "dev-token-alice")
    assert await emit_ack(alice, topic, {"order": 1, "item": "kayak"}) is None

    def see_message() -> None:
        item = wait_for(
            browser,
            lambda b: next((li for li in b.find_elements(By.CSS_SELECTOR, "#live-messages li") if "kayak" in li.text), None),
        )
        assert "from alice" in item.text, item.text
        assert '"item": "kayak"' in item.text, item.text
        # A test publish from the page reaches the view too (from "server").
        browser.find_element(By.ID, "f-data").clear()
        browser.find_element(By.ID, "f-data").send_keys('{"note": "from the dashboard"}')
        browser.find_element(By.XPATH, "//button[text()='Publish']").click()
        assert notice(browser).startswith("Published")
        item = wait_for(
            browser,
            lambda b: next((li for li in b.find_elements(By.CSS_SELECTOR, "#live-messages li") if "from the dashboard" in li.text), None),
        )
        assert "from server" in item.text, item.text
        # Messages published while the page reloaded are not shown again after it: the view
        # lists each once (the page starts from the view's buffer).
        texts = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#live-messages li")]
        assert sum("kayak" in t for t in texts) == 1, texts
        shoot(browser, "dashboard-live")

    def overview_and_phone() -> None:
        # The presence view lists alice with her presence data.
        browser.get(f"{url}/presence?project=demo-project&app={slug}&room=lobby")
        row = wait_for(browser, lambda b: next((tr.text for tr in b.find_elements(By.CSS_SELECTOR, "#presence tbody tr") if "alice" in tr.text), None))
        assert '"status": "packing kayaks"' in row, row
        browser.get(url)
        wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "h1").text == "Overview")
        # The page refreshes its figures and chart from /admin/stats: the traffic shows.
        wait_for(browser, lambda b: float(b.find_element(By.ID, "v-messages_in").text) >= 12)
        wait_for(browser, lambda b: b.find_element(By.ID, "p-in").get_attribute("points"))
        shoot(browser, "dashboard-overview")
        # The phone layout: the navigation wraps, nothing overflows the viewport sideways.
        browser.set_window_size(*PHONE)
        browser.get(f"{url}/rooms?project=demo-project&app={slug}")
        wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "h1").text == "Rooms")
        width = browser.execute_script("return document.documentElement.scrollWidth")
        viewport = browser.execute_script("return window.innerWidth")
        assert width <= viewport, f"page {width}px wide in a {viewport}px viewport"
        shoot(browser, "dashboard-phone")
        # Signing out ends the session.
        browser.find_element(By.XPATH, "//button[text()='Sign out']").click()
        wait_for(browser, lambda b: b.current_url.endswith("/admin/login"))
        browser.get(f"{base}/admin")
        wait_for(browser, lambda b: b.current_url.endswith("/admin/login"))

    await asyncio.to_thread(see_message)
    # Some traffic for the overview: bob receives what alice publishes, over two seconds (a
    # demonstration load, not a synchronisation).
    bob = await connect(skua.url, "dev-token-bob")
    await helpers.subscribe_ok(bob, topic)
    for i in range(10):
        assert await emit_ack(alice, topic, {"order": 100 + i}) is None
        await asyncio.sleep(0.2)
    await alice.set_app(slug).set_room("lobby").set_presence({"status": "packing kayaks"})
    await asyncio.to_thread(overview_and_phone)
    await helpers.close(alice)
    await helpers.close(bob)


class FlakyReceiver:
    """An HTTP receiver for trigger webhooks: answers `status` (500 until the test sets 200) and
    counts the requests (`arrived` is set at each)."""

    def __init__(self):
        self.status = 500
        self.paths: list[str] = []
        self.arrived = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.paths.append(self.path)
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                receiver.arrived.set()

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sign_in(browser, url: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{url}/login")
    browser.find_element(By.ID, "admin_key").send_keys(DEV_ADMIN_KEY)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "h1").text == "Overview")


def click_confirmed(browser, button) -> None:
    """Clicks a delete/revoke button and accepts the page's confirmation dialog."""
    from selenium.webdriver.support import expected_conditions

    button.click()
    wait_for(browser, expected_conditions.alert_is_present()).accept()
    wait_for(browser, expected_conditions.staleness_of(button))


def row_with(browser, caption: str, text: str):
    """The first row of the table captioned `caption` whose text contains `text` (None while
    there is none)."""
    from selenium.webdriver.common.by import By

    rows = browser.find_elements(By.XPATH, f"//table[caption='{caption}']/tbody/tr")
    return next((tr for tr in rows if text in tr.text), None)


@pytest.mark.timeout(120)
async def test_dashboard_revokes_a_grant_and_retries_a_dead_letter(skua_factory, browser):
    from nolag import NoLagServerError
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    # One attempt per trigger: a failure is a dead letter at once.
    skua = skua_factory("--webhook-trigger-attempts", "1")
    url = admin_url(skua)
    rx = FlakyReceiver()
    slug = f"vault-{uuid.uuid4().hex[:6]}"
    topic = f"{slug}/safe/events"
    try:
        def app_room_grants() -> None:
            sign_in(browser, url)
            # An app whose publishes trigger the (failing) receiver: created, then its trigger
            # webhook set on its edit page (the API's check first refuses a metadata address).
            browser.get(f"{url}/apps?project=demo-project")
            submit_form(browser, "/admin/apps", {"slug": slug, "name": "Vault", "topics": "events"})
            assert notice(browser) == f"App {slug} created."
            browser.find_element(By.CSS_SELECTOR, f"a[aria-label='Edit app {slug}']").click()
            wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "h1").text == f"Edit app {slug}")
            submit_form(browser, "/admin/apps/edit", {"trigger_webhook": "http://169.254.169.254/hook"})
            assert "link-local or cloud metadata" in notice(browser), notice(browser)
            submit_form(browser, "/admin/apps/edit", {"trigger_webhook": rx.url("/t")})
            assert notice(browser) == f"App {slug} saved.", notice(browser)
            assert browser.find_element(By.ID, "f-trigger_webhook").get_attribute("value") == rx.url("/t")
            browser.get(f"{url}/rooms?project=demo-project&app={slug}")
            submit_form(browser, "/admin/rooms", {"room": "safe", "name": "Safe"})
            assert notice(browser) == "Room safe created."
            # Grants for alice and bob through the page: the room becomes private.
            browser.get(f"{url}/grants?project=demo-project&app={slug}&room=safe")
            for actor in ("alice", "bob"):
                form = browser.find_element(By.CSS_SELECTOR, "form[method=post][action='/admin/grants']")
                form.find_element(By.NAME, "actor_id").send_keys(actor)
                Select(form.find_element(By.NAME, "permission")).select_by_visible_text("pubSub")
                click_and_leave(browser, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
                assert re.fullmatch(r"Grant \S+ created\.", notice(browser)), notice(browser)
            assert row_with(browser, "Grants", "alice") and row_with(browser, "Grants", "bob")

        await asyncio.to_thread(app_room_grants)
        alice = await connect(skua.url, "dev-token-alice")
        errors = Recorder("alice errors")
        alice.on("error", errors)
        await helpers.subscribe_ok(alice, topic)

        def revoke_alice() -> None:
            row = row_with(browser, "Grants", "alice")
            click_confirmed(browser, row.find_element(By.XPATH, ".//button[starts-with(text(), 'Revoke grant')]"))
            assert re.fullmatch(r"Grant \S+ revoked\.", notice(browser)), notice(browser)
            assert row_with(browser, "Grants", "alice") is None
            assert row_with(browser, "Grants", "bob"), "bob's grant stays: the room stays private"

        await asyncio.to_thread(revoke_alice)
        # The SDK surfaces the end of the subscription as an error event for the topic...
        (err,) = await errors.wait_for(
            lambda e: isinstance(e, NoLagServerError) and e.topic == topic, what="unknown_topic for the revoked topic"
        )
        assert (err.code, err.error) == (42940, "unknown_topic"), repr(err)
        # ...and the room is closed to alice now: her publish is refused.
        err = await emit_ack(alice, topic, {"n": 0})
        assert isinstance(err, NoLagServerError) and err.code == 42940, repr(err)

        # Bob's publish triggers the webhook; the receiver fails it: a dead letter.
        bob = await connect(skua.url, "dev-token-bob")
        assert await emit_ack(bob, topic, {"n": 1}) is None
        assert await asyncio.to_thread(rx.arrived.wait, WAIT_S), "no trigger reached the receiver"

        def dead_letter_and_retry() -> None:
            def shown(b):
                b.get(f"{url}/webhooks?project=demo-project")
                return row_with(b, "Dead letters", topic)

            row = wait_for(browser, shown)
            assert rx.url("/t") in row.text, row.text
            retry = row.find_element(By.XPATH, ".//button[starts-with(text(), 'Retry')]")
            delivery = retry.text.removeprefix("Retry ")
            # Still failing: the page says so and keeps it.
            rx.arrived.clear()
            click_and_leave(browser, retry)
            assert notice(browser).startswith(f"Delivery {delivery} failed again"), notice(browser)
            assert rx.arrived.is_set(), "the retry posted to the receiver"
            shoot(browser, "dashboard-webhooks")
            # The receiver is back: the retry delivers it and the dead letter is gone.
            rx.status = 200
            row = row_with(browser, "Dead letters", topic)
            click_and_leave(browser, row.find_element(By.XPATH, ".//button[starts-with(text(), 'Retry')]"))
            assert notice(browser) == f"Delivery {delivery} delivered.", notice(browser)
            assert row_with(browser, "Dead letters", topic) is None

        await asyncio.to_thread(dead_letter_and_retry)

        def recent_deliveries() -> None:
            # The node serving the page made both retries: its recent deliveries list them newest
            # first, the one that worked on top, with the receiver's host only (never the path).
            host = rx.url("").removeprefix("http://")

            def rows(b):
                found = b.find_elements(By.XPATH, "//table[caption='Recent deliveries']/tbody/tr")
                texts = [tr.text for tr in found if host in tr.text]
                return texts if len(texts) >= 2 else None

            texts = wait_for(browser, rows)
            assert texts[0].split()[2:6] == ["trigger", host, "ok", "200"], texts
            assert any(t.split()[2:6] == ["trigger", host, "status", "500"] for t in texts[1:]), texts
            assert not any("/t" in t for t in texts), f"the host only: {texts}"

        await asyncio.to_thread(recent_deliveries)
        assert rx.paths == ["/t", "/t", "/t"], "the first attempt and two retries"
        await helpers.close(alice)
        await helpers.close(bob)
    finally:
        rx.stop()


@pytest.mark.timeout(120)
async def test_dashboard_durable_page_shows_an_sdk_agent_groups_backlog(skua_factory, browser):
    """An SDK agent with a clientId (a persistent session) in a load-balanced group on the logged
    `tasks` topic gets a message and does not ack it (the SDK never acks): the durable page
    shows the group's backlog 1, in flight 1, and the agent as its member on this node."""
    from nolag import SubscribeOptions
    from selenium.webdriver.common.by import By

    import wake_worker

    skua = skua_factory()
    url = admin_url(skua)
    tasks = "demo/general/tasks"
    group = f"crew-{uuid.uuid4().hex[:6]}"
    client_id = f"w-{uuid.uuid4().hex[:6]}"
    worker = wake_worker.WorkerClient(skua.url, client_id)
    await asyncio.wait_for(worker.connect(), 10)
    got = Recorder("worker tasks")
    worker.on(tasks, got)
    await helpers.subscribe_ok(worker, tasks, SubscribeOptions(load_balance=True, load_balance_group=group))
    alice = await connect(skua.url, "dev-token-alice")
    assert await emit_ack(alice, tasks, {"job": 1}) is None
    await got.wait_count(1)
    assert got.calls[0][1].msg_id, "a logged message, kept until acked"

    def see_backlog() -> None:
        sign_in(browser, url)
        browser.get(f"{url}/durable?project=demo-project")
        assert browser.find_element(By.TAG_NAME, "h1").text == "Durable delivery"
        row = wait_for(browser, lambda b: row_with(b, "Durable groups", group))
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        assert cells[0] == tasks and cells[1] == group, cells
        assert cells[2] == "1" and cells[3] == "1", f"backlog 1, in flight 1: {cells}"
        assert cells[4].endswith("UTC)"), f"the oldest unacked message's age: {cells}"
        assert cells[5] == f"agent-1 ({client_id})", f"the member on this node: {cells}"
        shoot(browser, "dashboard-durable")

    await asyncio.to_thread(see_backlog)
    await helpers.close(worker)
    await helpers.close(alice)


def set_checkbox(form, name: str, on: bool) -> None:
    from selenium.webdriver.common.by import By

    box = form.find_element(By.CSS_SELECTOR, f"input[type=checkbox][name={name}]")
    if box.is_selected() != on:
        box.click()


def open_edit(browser, label: str, title: str) -> None:
    """Follows the "edit" link labelled `label` and waits for the page titled `title`."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, f"a[aria-label='{label}']").click()
    wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "h1").text == title)


@pytest.mark.timeout(180)
async def test_dashboard_edit_forms_change_what_skua_admin_sees(skua_factory, browser):
    """The overview's node list, then the edit forms, each change checked through `skua admin`
    (the gRPC API): a project's limits (a refused value first), a scope's name, an actor's name,
    state and scope, a lobby's rooms, an app's trigger webhook with headers and timeout (a
    reserved header refused first), a topic's own webhook and history. Works in a new project,
    deleted at the end through its page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from test_control_plane import admin, grpc_addresses

    skua = skua_factory("--grpc-listen", "127.0.0.1:0")
    url = admin_url(skua)
    grpc = grpc_addresses(skua)[0]
    project = f"dash-{uuid.uuid4().hex[:6]}"

    def cli(*args: str):
        r = admin(grpc, "--json", "--project", project, *args)
        assert r.returncode == 0, f"skua admin {' '.join(args)}: {r.stderr}"
        return json.loads(r.stdout)

    def node_list() -> None:
        sign_in(browser, url)
        me = browser.find_element(By.ID, "v-node").text
        caption = "Nodes registered in the presence backend"
        row = wait_for(browser, lambda b: row_with(b, caption, f"{me} (this node)"))
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        assert cells[1] == "up" and cells[2] not in ("", "unknown"), cells
        assert re.fullmatch(r"\d+s ago \(.* UTC\)", cells[3]), cells
        # In a cluster every node of it is listed (up), this one marked once.
        nodes = len(getattr(skua, "nodes", [skua]))

        def up_rows(b):
            rows = b.find_elements(By.XPATH, f"//table[caption='{caption}']/tbody/tr")
            texts = [tr.text for tr in rows if tr.find_elements(By.TAG_NAME, "td")[1].text == "up"]
            return texts if len(texts) >= nodes else None

        up = wait_for(browser, up_rows)
        assert len(up) >= nodes, up
        assert sum("(this node)" in t for t in up) == 1, up

    def project_limits() -> None:
        browser.get(f"{url}/projects")
        submit_form(browser, "/admin/projects", {"id": project, "name": "Dash"})
        assert notice(browser) == f"Project {project} created.", notice(browser)
        open_edit(browser, f"Edit project {project}", f"Edit project {project}")
        submit_form(browser, "/admin/projects/edit", {"rate_limit": "0"})
        assert "limits.rate_limit must be at least 1" in notice(browser), notice(browser)
        submit_form(browser, "/admin/projects/edit", {"max_connections": "500", "rate_limit": "25", "max_message_size": "65536"})
        assert notice(browser) == f"Project {project} saved.", notice(browser)
        shoot(browser, "dashboard-project")

    def scope_and_actor() -> None:
        browser.get(f"{url}/scopes?project={project}")
        submit_form(browser, "/admin/scopes", {"scope": "acme", "name": "Acme"})
        assert notice(browser) == "Scope acme created.", notice(browser)
        open_edit(browser, "Edit scope acme", "Edit scope acme")
        submit_form(browser, "/admin/scopes/edit", {"name": "Acme Two"})
        assert notice(browser) == "Scope acme saved.", notice(browser)
        browser.get(f"{url}/actors?project={project}")
        submit_form(browser, "/admin/actors", {"id": "worker-1", "actor_type": "agent", "name": "Worker"})
        assert notice(browser).startswith("Actor worker-1 created."), notice(browser)
        open_edit(browser, "Edit actor worker-1", "Edit actor worker-1")
        form = browser.find_element(By.CSS_SELECTOR, "form[method=post][action='/admin/actors/edit']")
        name = form.find_element(By.NAME, "name")
        name.clear()
        name.send_keys("Worker One")
        set_checkbox(form, "active", False)
        Select(form.find_element(By.NAME, "scope")).select_by_visible_text("acme (Acme Two)")
        click_and_leave(browser, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
        assert notice(browser) == "Actor worker-1 saved.", notice(browser)

    def lobby_and_webhooks() -> None:
        browser.get(f"{url}/apps?project={project}")
        submit_form(browser, "/admin/apps", {"slug": "ops", "topics": "events, alerts"})
        assert notice(browser) == "App ops created.", notice(browser)
        browser.get(f"{url}/rooms?project={project}&app=ops")
        for room in ("r1", "r2"):
            submit_form(browser, "/admin/rooms", {"room": room})
            assert notice(browser) == f"Room {room} created.", notice(browser)
        browser.get(f"{url}/lobbies?project={project}")
        submit_form(browser, "/admin/lobbies", {"lobby": "hall", "rooms": "r1"})
        assert notice(browser) == "Lobby hall created.", notice(browser)
        open_edit(browser, "Edit the rooms of lobby hall", "Edit lobby hall")
        submit_form(browser, "/admin/lobbies/edit", {"rooms": "r1, r2"})
        assert notice(browser) == "Lobby hall saved: 2 rooms.", notice(browser)
        # The app's trigger webhook with headers and a timeout.
        browser.get(f"{url}/apps?project={project}")
        open_edit(browser, "Edit app ops", "Edit app ops")
        hook = {"trigger_webhook": "http://127.0.0.1:9/hook", "trigger_webhook_timeout_ms": "2500"}
        submit_form(browser, "/admin/apps/edit", {**hook, "trigger_webhook_headers": "Content-Type: text/plain"})
        assert "may not be configured" in notice(browser), notice(browser)
        submit_form(browser, "/admin/apps/edit", {**hook, "trigger_webhook_headers": "X-Team: blue\nX-Env: test"})
        assert notice(browser) == "App ops saved.", notice(browser)
        # The topic's own webhook (headers, timeout) and history, from the app's topic list.
        browser.find_element(By.LINK_TEXT, "events").click()
        wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "h1").text == "Edit topic ops/events")
        submit_form(browser, "/admin/apps/topic", {
            "on_publish": "http://127.0.0.1:9/own", "on_publish_headers": "X-Topic: events",
            "on_publish_timeout_ms": "1500", "history_size": "20", "history_ttl": "60",
        })
        assert notice(browser) == "Topic events saved.", notice(browser)

    await asyncio.to_thread(node_list)
    await asyncio.to_thread(project_limits)
    limits = cli("projects", "get", project)["limits"]
    assert limits == {"max_connections": 500, "monthly_message_quota": None, "rate_limit": 25, "max_message_size": 65536}, limits
    await asyncio.to_thread(scope_and_actor)
    scope = cli("scopes", "get", "acme")
    assert scope["name"] == "Acme Two", scope
    actor = cli("actors", "get", "worker-1")
    assert (actor["name"], actor["active"], actor["scope_id"]) == ("Worker One", False, scope["id"]), actor
    await asyncio.to_thread(lobby_and_webhooks)
    assert cli("lobbies", "get", "hall")["rooms"] == ["r1", "r2"]
    app = cli("apps", "get", "ops")
    assert app["trigger_webhook"] == {
        "url": "http://127.0.0.1:9/hook", "headers": {"X-Env": "test", "X-Team": "blue"}, "timeout_ms": 2500,
    }, app
    events = next(t for t in app["topics"] if t["name"] == "events")
    assert events["webhooks"]["on_publish"] == {
        "url": "http://127.0.0.1:9/own", "headers": {"X-Topic": "events"}, "timeout_ms": 1500,
    }, events
    assert events["history"] == {"size": 20, "ttl_ms": 60000}, events

    def delete_project() -> None:
        browser.get(f"{url}/projects")
        row = row_with(browser, "Projects", project)
        click_confirmed(browser, row.find_element(By.XPATH, ".//button[starts-with(text(), 'Delete')]"))
        assert notice(browser).startswith(f"Project {project} deleted"), notice(browser)

    await asyncio.to_thread(delete_project)
    gone = admin(grpc, "projects", "get", project)
    assert gone.returncode == 1 and "NotFound" in gone.stderr, gone
