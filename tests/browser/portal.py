#!/usr/bin/env python3
"""The portal in a real browser: headless Chromium (Debian's chromium and chromium-driver)
driven by Selenium, against a running `edgehook serve` (started by the Rust test
host/edgehook/tests/portal.rs, which runs this script and fails if it fails).

    portal.py --base http://127.0.0.1:PORT --admin-token TOKEN --out DIR [--partner]

It walks the operator story (find a disabled subscription, enable it again, replay a range,
watch the progress, delivery search and attempts, keys), the XSS checks (a subscription
whose URL and header names try to inject script: rendered as text, no script runs) and, with
--partner, the partner story (open a portal link, create a subscription, copy its secret,
send a test delivery, see it arrive, the delivery log, a resend, a replay, rotate, the
Notices page: a notification endpoint registered, a disable's signed notice received and
verified, the endpoint removed; delete). Each main screen is saved as a PNG in DIR. Every
wait is a condition with a deadline (Selenium's explicit waits); the only network is
127.0.0.1 (the server and this script's receiver).
"""

import argparse
import hashlib
import hmac
import json
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

DEADLINE = 60

# The XSS probes: every character here is one the API accepts in a URL or a header name.
XSS_PATH = "/xss?q=');alert(1);//&next=javascript:alert(2)&x=%3Cscript%3E"
XSS_HEADER = "X-'||alert`1`||'"
XSS_VALUE = "<script>alert(3)</script><img src=x onerror=alert(4)>"


# What a condition may meet while the page redraws what it reads (a refresh re-renders a
# table between finding its cells and reading them): not a failure, a reason to look again.
REDRAWN = (NoSuchElementException, StaleElementReferenceException)

class Receiver:
    """A loopback webhook receiver: records every request; paths under /flaky answer 410
    while `gone` is set, everything else 200."""

    def __init__(self):
        self.gone = True
        self.received = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                with receiver.lock:
                    receiver.received.append(
                        (self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                status = 410 if self.path.startswith("/flaky") and receiver.gone else 200
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, path_prefix, event=None):
        with self.lock:
            return sum(
                1
                for p, h, _ in self.received
                if p.startswith(path_prefix)
                and (event is None or h.get("x-service-event") == event)
            )

    def requests(self, path_prefix):
        with self.lock:
            return [(p, h) for p, h, _ in self.received if p.startswith(path_prefix)]

    def posts(self, path_prefix):
        """Every request under `path_prefix`: path, headers and raw body."""
        with self.lock:
            return [r for r in self.received if r[0].startswith(path_prefix)]


class Api:
    """The REST API, for the setup the browser does not do."""

    def __init__(self, base, admin):
        self.base, self.admin = base, admin

    def call(self, method, path, body=None, bearer=None, headers=None):
        """`bearer`: None for the admin token, False for no Authorization at all."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if bearer is not False:
            req.add_header("Authorization", f"Bearer {bearer or self.admin}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=DEADLINE) as res:
                text = res.read().decode()
                return res.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as e:
            text = e.read().decode()
            return e.code, (json.loads(text) if text else None)

    def ok(self, method, path, body=None, bearer=None, headers=None):
        status, doc = self.call(method, path, body, bearer, headers)
        if status >= 300:
            raise AssertionError(f"{method} {path}: {status} {doc}")
        return doc

    def publish(self, load_id):
        return self.ok(
            "POST", "/internal/v1/events", {"id": load_id},
            headers={"X-Service-Event": "load.created"},
        )


class Walk:
    def __init__(self, args):
        self.args = args
        self.base = args.base
        self.out = args.out
        os.makedirs(self.out, exist_ok=True)
        self.api = Api(args.base, args.admin_token)
        self.receiver = Receiver()
        options = Options()
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for flag in [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1280,800", "--no-first-run", "--disable-extensions",
            "--disable-background-networking", "--disable-sync", "--disable-component-update",
            "--disable-default-apps", "--metrics-recording-only", "--no-proxy-server",
        ]:
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
        self.driver = webdriver.Chrome(options=options, service=service)
        self.driver.set_window_size(1280, 800)
        self.console = []

    # -- helpers -------------------------------------------------------------------------

    def wait(self, what, condition, timeout=DEADLINE):
        try:
            return WebDriverWait(
                self.driver, timeout, poll_frequency=0.1, ignored_exceptions=REDRAWN
            ).until(lambda _: condition())
        except Exception as e:
            self.shot("failed-" + what.replace(" ", "-")[:40])
            raise AssertionError(f"timed out waiting for {what}") from e

    def find(self, css, within=None):
        return (within or self.driver).find_element(By.CSS_SELECTOR, css)

    def finds(self, css, within=None):
        return (within or self.driver).find_elements(By.CSS_SELECTOR, css)

    def visible(self, css):
        return self.wait(css, lambda: next((e for e in self.finds(css) if e.is_displayed()), None))

    def button(self, text, within=None):
        """The visible button whose text or aria-label is `text`."""
        def look():
            for b in self.finds("button", within):
                if b.is_displayed() and b.is_enabled() and (
                    b.text.strip() == text or b.get_attribute("aria-label") == text
                ):
                    return b
            return None
        return self.wait(f"button {text}", look)

    def refresh_until(self, what, button, condition):
        """Waits for `condition`, clicking `button` (a refresh) whenever it is not met yet."""
        def check():
            if condition():
                return True
            self.button(button).click()
            return False
        return WebDriverWait(
            self.driver, DEADLINE, poll_frequency=0.5, ignored_exceptions=REDRAWN
        ).until(lambda _: check(), what)

    def section(self, name):
        self.button(name, self.find("#nav")).click()
        self.wait(f"section {name}", lambda: self.find("main h2").text.strip() != "")

    def shot(self, name):
        path = os.path.join(self.out, f"{name}.png")
        self.driver.save_screenshot(path)
        print(f"screenshot {path}")

    def no_alert(self):
        try:
            alert = self.driver.switch_to.alert
            text = alert.text
            alert.dismiss()
            raise AssertionError(f"a script ran: alert({text!r})")
        except NoAlertPresentException:
            pass
        injected = self.driver.execute_script(
            "return document.querySelectorAll('main script, main img, main iframe').length"
        )
        assert injected == 0, f"{injected} injected elements in main"

    def labelled(self, screen):
        """Every control on the page has a name a screen reader reads out."""
        unnamed = self.driver.execute_script("""
            const out = [];
            for (const el of document.querySelectorAll('input, select, textarea, button')) {
              if (el.type === 'hidden' || el.closest('[hidden]')) continue;
              const named = el.getAttribute('aria-label')
                || (el.labels && [...el.labels].some((l) => l.textContent.trim()))
                || (el.tagName === 'BUTTON' && el.textContent.trim());
              if (!named) out.push(el.outerHTML.slice(0, 120));
            }
            return out;""")
        assert not unnamed, f"{screen}: controls without a label: {unnamed}"

    def collect_console(self):
        self.console += self.driver.get_log("browser")

    def check_console(self):
        self.collect_console()
        bad = [
            e["message"] for e in self.console
            if "Content Security Policy" in e["message"] or "Uncaught" in e["message"]
        ]
        assert not bad, f"console errors: {bad}"

    # -- setup ---------------------------------------------------------------------------

    def setup(self):
        key = self.api.ok("POST", "/internal/v1/clients/acme/keys")["data"]["apiKey"]
        self.key = key
        flaky = self.api.ok(
            "POST", "/v1/webhooks",
            {"url": self.receiver.url + "/flaky", "eventTypes": ["load.created"]}, bearer=key,
        )["data"]["id"]
        self.flaky = flaky
        # Attempt 1 is answered 410: the subscription is disabled (gone); the events after
        # it are skipped.
        self.api.publish("L1")
        self.wait("the subscription disabled by a 410", lambda: self.api.ok(
            "GET", f"/internal/v1/subscriptions/{flaky}")["data"]["status"] == "disabled")
        self.api.publish("L2")
        self.api.publish("L3")
        self.xss_url = self.receiver.url + XSS_PATH
        xss = self.api.ok(
            "POST", "/v1/webhooks",
            {"url": self.xss_url, "eventTypes": ["load.updated"],
             "headers": {XSS_HEADER: XSS_VALUE}}, bearer=key,
        )["data"]["id"]
        self.xss = xss
        self.api.ok("POST", f"/internal/v1/subscriptions/{xss}/disable", {"reason": "xss_probe"})

    # -- the operator ----------------------------------------------------------------------

    def operator(self):
        d = self.driver
        d.get(self.base + "/portal/")
        self.wait("the landing page", lambda: "Welcome" in self.find("main").text)
        self.labelled("landing")
        self.shot("landing")
        self.button("Operator sign-in").click()
        token = self.visible("input[name=token]")
        # A wrong token: the API's error, with its code and request id.
        token.send_keys("not-the-token", Keys.ENTER)
        error = self.visible("main .error")
        self.wait("the error's request id", lambda: error.find_element(By.CSS_SELECTOR, ".request-id").text.startswith("req_"))
        assert "unauthorized" in error.text, error.text
        token.clear()
        # Keyboard only: type the token, Enter submits.
        token.send_keys(self.args.admin_token, Keys.ENTER)
        self.wait("the disabled list", lambda: self.flaky in self.find("#disabled-list").text)
        assert d.execute_script("return sessionStorage.getItem('edgehook.adminToken')") == self.args.admin_token
        assert self.args.admin_token not in d.current_url
        self.labelled("subscriptions")
        self.shot("operator-subscriptions")

        # The XSS subscription's URL is in the list as text, and nothing ran.
        urls = [e.text for e in self.finds("#disabled-list td[data-label=URL]")]
        assert self.xss_url in urls, f"{self.xss_url!r} not among {urls}"
        self.no_alert()

        # Filters: by reason.
        reason = Select(self.find("select[name=reason]"))
        reason.select_by_value("gone")
        self.wait("only the gone subscription", lambda: self.xss not in self.find("#disabled-list").text
                  and self.flaky in self.find("#disabled-list").text)
        reason.select_by_value("*")
        self.wait("only the operator's reason", lambda: self.xss in self.find("#disabled-list").text
                  and self.flaky not in self.find("#disabled-list").text)
        reason.select_by_value("")

        # Enable it again.
        self.button(f"Open {self.flaky}").click()
        panel = self.visible("#subscription-panel")
        assert "gone" in panel.text, panel.text
        self.receiver.gone = False
        self.button("Enable").click()
        self.wait("enabled", lambda: f"Enabled {self.flaky}" in self.find("#notice").text)
        self.wait("active", lambda: "active" in self.find("#subscription-panel").text)
        self.shot("operator-enabled")
        # The status filter: acme's active subscriptions now hold it; the disabled ones not.
        Select(self.find("select[name=status]")).select_by_value("active")
        self.wait("a client asked for", lambda: "Enter a client id" in self.find("#disabled-list").text)
        client_filter = self.visible("section[aria-labelledby=dis-h] input[name=clientId]")
        client_filter.send_keys("acme", Keys.ENTER)
        self.wait("acme's active ones", lambda: self.flaky in self.find("#disabled-list").text
                  and self.xss not in self.find("#disabled-list").text)
        Select(self.find("select[name=status]")).select_by_value("disabled")
        self.wait("acme's disabled ones", lambda: self.xss in self.find("#disabled-list").text
                  and self.flaky not in self.find("#disabled-list").text)

        # Replay the range it failed and skipped, and watch the progress.
        self.button("Replay a range of it").click()
        subs = self.visible("input[name=subscriptionIds]")
        assert subs.get_attribute("value") == self.flaky
        self.button("Start the replay").click()
        state = self.visible(".replay-state")
        self.wait("the replay done", lambda: state.get_attribute("data-state") == "done", 90)
        assert "3 of 3 replayed" in state.text, state.text
        assert self.find(".replay-progress progress").get_attribute("value") == "3"
        self.shot("operator-replay")
        self.wait("the replayed deliveries arrive", lambda: self.receiver.count("/flaky") >= 4, 90)

        # Delivery search, keyboard only: Tab to the section's button, Enter.
        d.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
        for _ in range(30):
            if d.switch_to.active_element.get_attribute("data-section") == "Deliveries":
                break
            ActionChains(d).send_keys(Keys.TAB).perform()
        assert d.switch_to.active_element.get_attribute("data-section") == "Deliveries"
        ActionChains(d).send_keys(Keys.ENTER).perform()
        sub_input = self.visible("input[name=subscriptionId]")
        sub_input.send_keys(self.flaky, Keys.ENTER)
        self.refresh_until("three deliveries, all succeeded", "Search", lambda: [
            e.text for e in self.finds("#delivery-results td[data-label=Status]")] == ["succeeded"] * 3)
        self.finds("#delivery-results tbody tr")[0].find_element(By.CSS_SELECTOR, "button").click()
        detail = self.visible("#delivery-detail table")
        codes = [e.text for e in self.finds("#delivery-detail td[data-label='Status code']")]
        assert "410" in codes and "200" in codes, codes
        self.labelled("deliveries")
        self.shot("operator-delivery")

        # Keys: issue one (shown once), then revoke it.
        self.section("Clients")
        client = self.visible("input[name=clientId]")
        client.send_keys("acme", Keys.ENTER)
        self.visible("#client-out table")
        self.button("Issue a key").click()
        secret = self.visible("#notice .secret-value")
        api_key = secret.get_attribute("value")
        assert api_key.startswith("ehk_"), api_key
        label = self.find("#notice .secret-once strong").text
        key_id = label.split()[-1]
        assert self.api.call("GET", "/v1/webhooks", bearer=api_key)[0] == 200
        self.button("Copy", self.find("#notice")).click()
        self.wait("copy feedback", lambda: self.find("#notice .copy-status").text != "")
        self.labelled("clients")
        self.shot("operator-clients")
        row = next(r for r in self.finds("#client-out tbody tr") if key_id in r.text)
        self.button("Revoke", row).click()
        self.wait("revoked", lambda: f"Revoked {key_id}" in self.find("#notice").text)
        assert self.api.call("GET", "/v1/webhooks", bearer=api_key)[0] == 401

        # The XSS subscription in the detail view: text, nothing ran.
        self.section("Subscriptions")
        lookup = self.visible("input[name=id]")
        lookup.send_keys(self.xss, Keys.ENTER)
        url = self.visible("#subscription-panel .sub-url")
        assert url.text == self.xss_url, url.text
        self.no_alert()
        self.shot("operator-xss")

        # A phone's width: nothing wider than the screen, tables as cards.
        d.set_window_size(390, 844)
        self.section("Subscriptions")
        self.wait("the list", lambda: self.flaky not in self.find("#disabled-list").text
                  and self.xss in self.find("#disabled-list").text)
        overflow = d.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{overflow}px wider than a phone's screen"
        self.shot("operator-phone")
        d.set_window_size(1280, 800)
        self.check_console()

    # -- the partner ---------------------------------------------------------------------

    def partner(self):
        d = self.driver
        # The operator mints a link.
        self.section("Clients")
        client = self.visible("input[name=clientId]")
        client.clear()
        client.send_keys("acme", Keys.ENTER)
        self.visible("#client-out table")
        self.button("Create a partner portal link").click()
        link = self.visible(".client-result .secret-value").get_attribute("value")
        assert "/portal/#token=" in link, link
        self.button("Sign out").click()
        self.wait("signed out", lambda: "Welcome" in self.find("main").text)

        # The partner opens it: the token leaves the address bar, a session starts.
        d.get(link)
        self.wait("the session", lambda: self.finds("#client-id") and self.find("#client-id").text == "acme")
        assert "token" not in d.current_url, d.current_url
        cookies = {c["name"]: c for c in d.get_cookies()}
        session = cookies.get("edgehook_session")
        assert session and session.get("httpOnly"), cookies
        assert session.get("sameSite") == "Strict", session
        assert d.execute_script("return document.cookie").find("edgehook_session") < 0
        # The same link again: used up.
        status, doc = self.api.call("POST", "/v1/portal/sessions", {"token": link.split("#token=")[1]}, bearer=False)
        assert status == 401, (status, doc)
        self.labelled("partner list")
        self.shot("partner-subscriptions")

        # Its disabled subscriptions: the XSS header name is text.
        self.section("Disabled")
        self.button(f"Open {self.xss}").click()
        names = self.visible("#subscription-panel .header-names")
        assert names.text == XSS_HEADER, names.text
        assert self.find("#subscription-panel .sub-url").text == self.xss_url
        self.no_alert()

        # Create one: the secret once, with a copy button.
        self.section("New subscription")
        self.visible("input[name=url]").send_keys(self.receiver.url + "/partner")
        self.find("input[name=headerName]").send_keys("X-Receiver-Token")
        self.find("input[name=headerValue]").send_keys("t0ken")
        self.button("Create the subscription").click()
        secret = self.visible(".secret-value").get_attribute("value")
        assert secret.startswith("whsec_"), secret
        self.button("Copy").click()
        self.wait("copy feedback", lambda: self.find(".copy-status").text != "")
        self.visible("#subscription-panel")
        self.shot("partner-created")

        # A test delivery arrives at the receiver.
        self.button("Send a test delivery").click()
        result = self.visible(".test-result")
        assert "arrived" in result.text and "200" in result.text, result.text
        pings = [h for p, h in self.receiver.requests("/partner") if h.get("x-service-event") == "webhook.ping"]
        assert pings and pings[0].get("x-receiver-token") == "t0ken", pings

        # An event: its delivery in the log, with its attempt.
        self.api.publish("P1")
        self.wait("the delivery arrives", lambda: self.receiver.count("/partner", "load.created") >= 1)
        self.button("Delivery log").click()
        self.refresh_until("the delivery in the log", "Refresh", lambda: any(
            "succeeded" in e.text for e in self.finds("#delivery-log details.delivery")))
        entry = self.find("#delivery-log details.delivery")
        self.find("summary", entry).click()
        assert "200" in entry.text, entry.text
        self.shot("partner-delivery-log")

        # Resend that delivery: it arrives again, under the same delivery id.
        self.button("Resend this delivery", entry).click()
        self.wait("resending", lambda: "Resending" in entry.text)
        self.wait("the resent delivery arrives", lambda: self.receiver.count("/partner", "load.created") >= 2)
        ids = {h.get("x-service-delivery-id") for p, h in self.receiver.requests("/partner")
               if h.get("x-service-event") == "load.created"}
        assert len(ids) == 1, ids

        # Replay what was delivered, with progress.
        self.find("#subscription-panel details.panel summary").click()
        replay = self.find("#subscription-panel details.panel")
        self.find("input[value=delivered]", replay).click()
        self.button("Replay", replay).click()
        state = self.visible(".replay-state")
        self.wait("the partner's replay done", lambda: state.get_attribute("data-state") == "done", 90)
        self.wait("the replayed delivery arrives", lambda: self.receiver.count("/partner", "load.created") >= 3, 90)

        # Rotate the secret, then delete the subscription (after a confirmation).
        self.button("Rotate the secret").click()
        rotated = self.visible("#action-result .secret-value").get_attribute("value")
        assert rotated.startswith("whsec_") and rotated != secret

        # Change the URL in place: the same subscription, delivering to the new URL.
        sub_id = self.find("#ps-h .mono").text.strip()
        self.find("#retarget summary").click()
        url = self.visible("#retarget-url")
        url.clear()
        url.send_keys(self.receiver.url + "/moved")
        self.button("Save").click()
        self.wait("changed in place", lambda: "Changed" in self.find("#notice").text)
        assert "/moved" in self.find("#subscription-panel .sub-url").text
        self.api.publish("P2")
        self.wait("the delivery at the new URL", lambda: self.receiver.count("/moved", "load.created") >= 1)

        # Where did load P1 go: the search box finds its event and its delivery.
        self.section("Find a load")
        self.visible("#load-id").send_keys("P1")
        self.button("Find").click()
        found = self.visible("#load-events .load-event")
        assert "load.created" in found.text and "succeeded" in found.text, found.text
        self.labelled("find a load")
        self.shot("partner-find-load")
        self.partner_notices()
        self.section("Active")
        self.button(f"Open {sub_id}").click()
        self.visible("#subscription-panel")
        self.button("Delete").click()
        self.button("Yes, delete it").click()
        self.wait("deleted", lambda: "Deleted" in self.find("#notice").text)
        self.check_console()
        self.button("Sign out").click()
        self.wait("signed out", lambda: "Welcome" in self.find("main").text)
        status = d.execute_async_script("""
            const done = arguments[arguments.length - 1];
            fetch('/v1/portal/sessions/current', {credentials: 'same-origin'}).then((r) => done(r.status));""")
        assert status == 401, f"the session still answers {status} after signing out"

    def partner_notices(self):
        """The Notices page: register the notification endpoint (its secret once), hear of a
        disable through it, signed with that secret, then remove it."""
        d = self.driver
        path = "/v1/notification-endpoint"
        self.section("Notices")
        self.visible("#no-notification-endpoint")
        url = self.receiver.url + "/notices"
        self.visible("main form input[name=url]").send_keys(url)
        self.button("Save the notification URL").click()
        secret = self.visible("#notification-out .secret-value").get_attribute("value")
        assert secret.startswith("whsec_"), secret
        self.wait("the endpoint shown", lambda: url in self.find("#notification-endpoint").text)
        self.labelled("notices")
        self.shot("partner-notices")

        # A reload: the endpoint is still there, its secret is not shown again.
        d.refresh()
        self.wait("the session again", lambda: self.finds("#client-id") and self.find("#client-id").text == "acme")
        self.section("Notices")
        self.wait("the endpoint after a reload", lambda: url in self.find("#notification-endpoint").text)
        assert not self.finds(".secret-value"), "the notification secret shown again"
        assert secret not in d.page_source, "the notification secret in the page after a reload"

        # The operator disables one of acme's subscriptions: the receiver gets a signed notice.
        self.api.ok("POST", f"/internal/v1/subscriptions/{self.flaky}/disable", {"reason": "notice_walk"})

        def disabled_notice():
            for _, headers, body in self.receiver.posts("/notices"):
                if headers.get("x-service-event") == "subscription.disabled":
                    return headers, body
            return None
        headers, body = self.wait("the subscription.disabled notice", disabled_notice)
        timestamp = headers.get("x-service-timestamp", "")
        assert timestamp.isdigit() and abs(time.time() - int(timestamp)) <= 300, timestamp
        expected = hmac.new(
            secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(expected, headers.get("x-service-signature", "")), \
            "the notice is not signed with the notification secret"
        assert headers.get("x-service-delivery-id", "").startswith("dlv_"), headers
        notice = json.loads(body)
        assert (notice["type"], notice["subscriptionId"], notice["reason"], notice["status"]) == (
            "subscription.disabled", self.flaky, "notice_walk", "disabled"), notice
        assert b"whsec_" not in body, body

        # The page shows what the API says.
        endpoint = self.api.ok("GET", path, bearer=self.key)["data"]
        assert "signingSecret" not in endpoint, endpoint
        self.section("Notices")
        self.wait("the endpoint redrawn", lambda: url in self.find("#notification-endpoint").text)
        shown = self.find("#notification-endpoint")
        terms = [e.text for e in self.finds("dt", shown)]
        values = self.finds("dd", shown)
        page = dict(zip(terms, values))
        assert page["URL"].text == endpoint["url"], (page["URL"].text, endpoint)
        assert page["Notices"].text == ", ".join(endpoint["eventTypes"]), (page["Notices"].text, endpoint)
        for term, field in [("Registered", "createdAt"), ("Changed", "updatedAt")]:
            when = self.find("time", page[term]).get_attribute("datetime")
            assert when == d.execute_script(
                "return new Date(arguments[0]).toISOString()", endpoint[field]), (term, when, endpoint)

        # Removed through the page: the API no longer has it.
        self.button("Remove", shown).click()
        self.wait("removed", lambda: "Removed" in self.find("#notification-out").text)
        self.visible("#no-notification-endpoint")
        status, doc = self.api.call("GET", path, bearer=self.key)
        assert status == 404, (status, doc)

    def run(self):
        try:
            self.setup()
            self.operator()
            if self.args.partner:
                self.partner()
        finally:
            try:
                self.collect_console()
                with open(os.path.join(self.out, "console.json"), "w") as f:
                    json.dump(self.console, f, indent=1)
            finally:
                self.driver.quit()
                self.receiver.server.shutdown()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the server, e.g. http://127.0.0.1:8080")
    p.add_argument("--admin-token", required=True)
    p.add_argument("--out", required=True, help="where the screenshots go")
    p.add_argument("--partner", action="store_true", help="also walk the partner story")
    args = p.parse_args()
    Walk(args).run()
    print("portal browser walk: ok")


if __name__ == "__main__":
    sys.exit(main())
