"""Clicks in a real browser: one click beacon per click, the browser still follows the
link (href exactly the advertiser's), middle-click and keyboard activation count too, and
repeats of one rendering bill once; the ad's click trackers fire on a click, never on view."""

from e2e.catalogue import ad_id
from e2e.helpers import Requests, ad_height, open_page, round_trip, show

CLICK = "/dea/url/click"
LINK = '[data-ad-slot="main-slot"] a.edge-ad__link'
LANDING = "https://pets.example/go?ad=e2e-dog-food&utm_source=e2e"
# The pets ad's trackers on the page server (e2e/catalogue.py): one of each tracker_type.
VIEW_PIXELS = (ad_id("pets"), ad_id("pets") + "/viewable")
CLICK_PIXEL = ad_id("pets") + "/click"


def viewable_ad(page, site, pub):
    monitor = open_page(page, site, pub=pub, topic="pets")
    monitor.wait_for_event("filled", "main-slot")
    show(page, ad_height(page))
    monitor.wait_for_event("viewable", "main-slot")
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    # The advertiser's site, answered here (the test machine has no outside network).
    page.context.route(
        "https://pets.example/**",
        lambda route: route.fulfill(status=200, body="<p>landing</p>", content_type="text/html"),
    )
    return monitor


def test_a_click_fires_one_beacon_and_the_page_still_navigates(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = viewable_ad(page, site, pub)
    with page.context.expect_page(timeout=10_000) as popup:
        page.click(LINK)
    landing = popup.value
    landing.wait_for_load_state()
    assert landing.url == LANDING  # href untouched: no redirect through the edge
    site.beacons.wait_for("publisher", pub, "clicks", 1)
    assert sent.to(CLICK) == [("POST", CLICK)]
    assert site.beacons.count("ad", ad_id("pets"), "clicks") >= 1
    assert not monitor.page_errors


def test_middle_click_and_keyboard_activation_count_and_bill_once(page, site, pub):
    sent = Requests(page, site.edge_url)
    viewable_ad(page, site, pub)

    def is_click(response):
        return response.url.endswith(CLICK) and response.request.method == "POST"

    # A middle click opens a background tab (or nothing, headless): the beacon is the point.
    box = page.locator(LINK).bounding_box()
    assert box is not None
    with page.expect_response(is_click, timeout=10_000) as first:
        # The mouse itself (a locator click would wait for a navigation that never comes).
        page.mouse.click(box["x"] + 5, box["y"] + 5, button="middle")
    page.focus(LINK)
    with (
        page.expect_response(is_click, timeout=10_000) as second,
        page.context.expect_page(timeout=10_000) as popup,
    ):
        page.keyboard.press("Enter")
    popup.value.wait_for_load_state()
    # The middle click may open its background tab late, so the page caught above can be
    # that one (whose request may leave before the route applies, ending on an error page):
    # the point is that the keyboard activation reached the advertiser's page in some tab.
    for _ in range(100):
        if LANDING in [p.url for p in page.context.pages]:
            break
        page.wait_for_timeout(100)
    assert LANDING in [p.url for p in page.context.pages]
    assert sent.to(CLICK) == [("POST", CLICK), ("POST", CLICK)]  # one beacon per click
    # Both answered (so both are stored); they carry the rendering's one click id, so the
    # second is a replay and counts nothing. (A keepalive response's body cannot be read
    # here, so the store is asked.)
    assert first.value.status == second.value.status == 200
    # One click stored for the two beacons. All e2e clicks come from one address, so the
    # per-client click rate (1 a minute) may have judged this one invalid after the
    # previous test's click: valid or rate-limited, it is stored once and billed at most once.
    c = site.beacons.counters("publisher", pub)
    stored = c.get("clicks", 0) + c.get("invalid_clicks_rate_limited", 0)
    assert stored == 1 and c.get("invalid_clicks_duplicate", 0) == 0


def test_click_trackers_fire_on_the_first_click_and_never_on_view(page, site, pub):
    asked: list[str] = []  # the trackers the page requested, in order
    page.on("request", lambda r: "/px/" in r.url and asked.append(r.url.split("/px/", 1)[1]))
    viewable_ad(page, site, pub)
    for pixel in VIEW_PIXELS:  # impression and viewable trackers: when the ad is viewable
        site.pages.wait_for_pixels(pub, pixel, 1)
    round_trip(page)  # the page's request events so far have reached `asked`
    # Listed first, the click tracker would have been requested before the two that came.
    assert CLICK_PIXEL not in asked and site.pages.pixel_fires(pub, CLICK_PIXEL) == 0
    with page.context.expect_page(timeout=10_000):
        page.click(LINK)
    site.pages.wait_for_pixels(pub, CLICK_PIXEL, 1)

    def is_click(response):
        return response.url.endswith(CLICK) and response.request.method == "POST"

    # A repeat (here a middle click) sends its beacon, which counts nothing, and requests no
    # tracker again: the page has that image already (docs/tag.md).
    box = page.locator(LINK).bounding_box()
    assert box is not None
    with page.expect_response(is_click, timeout=10_000):
        page.mouse.click(box["x"] + 5, box["y"] + 5, button="middle")
    round_trip(page)
    assert asked.count(CLICK_PIXEL) == 1 and site.pages.pixel_fires(pub, CLICK_PIXEL) == 1
    assert [site.pages.pixel_fires(pub, pixel) for pixel in VIEW_PIXELS] == [1, 1]


def test_right_click_is_not_a_click(page, site, pub):
    sent = Requests(page, site.edge_url)
    viewable_ad(page, site, pub)
    box = page.locator(LINK).bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 5, box["y"] + 5, button="right")
    page.keyboard.press("Escape")
    page.wait_for_timeout(300)
    assert sent.to(CLICK) == [] and site.pages.pixel_fires(pub, CLICK_PIXEL) == 0


def test_a_click_made_by_script_is_not_a_click(page, site, pub):
    # A "click anywhere" widget, a session replay or a publisher's script: not a person, so
    # no beacon, no click tracker and nothing billed; a person's click afterwards counts.
    sent = Requests(page, site.edge_url)
    viewable_ad(page, site, pub)
    page.evaluate(
        """(sel) => {
            const link = document.querySelector(sel);
            link.addEventListener("click", (e) => e.preventDefault()); // stay on the page
            link.click();
            link.dispatchEvent(new MouseEvent("click", { bubbles: true, cancelable: true }));
            link.dispatchEvent(new MouseEvent("auxclick", { bubbles: true, button: 1 }));
        }""",
        LINK,
    )
    round_trip(page)
    assert sent.to(CLICK) == [] and site.pages.pixel_fires(pub, CLICK_PIXEL) == 0
    box = page.locator(LINK).bounding_box()
    assert box is not None

    def is_click(response):
        return response.url.endswith(CLICK) and response.request.method == "POST"

    with page.expect_response(is_click, timeout=10_000):
        page.mouse.click(box["x"] + 5, box["y"] + 5)
    assert sent.to(CLICK) == [("POST", CLICK)]
    site.pages.wait_for_pixels(pub, CLICK_PIXEL, 1)


def test_the_click_id_macro_is_expanded_only_where_the_advertiser_put_it(page, site, pub):
    monitor = open_page(page, site, pub=pub, topic="coffee")
    monitor.wait_for_event("filled", "main-slot")
    show(page, ad_height(page))
    monitor.wait_for_event("viewable", "main-slot")
    href = page.get_attribute(LINK, "href")
    prefix = "https://coffee.example/go?ad=e2e-espresso&utm_source=e2e&click="
    assert href.startswith(prefix) and "{" not in href
    click_id = href.removeprefix(prefix)
    page.context.route("https://coffee.example/**", lambda route: route.fulfill(body="ok"))

    def is_click(response):
        return response.url.endswith(CLICK) and response.request.method == "POST"

    with (
        page.expect_response(is_click, timeout=10_000) as answer,
        page.context.expect_page(timeout=10_000),
    ):
        page.click(LINK)
    assert answer.value.request.post_data_json["click_id"] == click_id
