"""The e2e edge's own small catalogue: one clear ad per topic of the test pages.

Pixel trackers point at the page server, which counts each fire per publisher (it reads
the publisher from the page URL in the pixel request's Referer). Each ad has an impression
tracker at ``/px/<ad id>``; the pets ad (the click tests') also has a ``click`` and a
``viewable`` one, at ``/px/<ad id>/click`` and ``/px/<ad id>/viewable``.
"""

from __future__ import annotations

# topic -> (ad id, advertiser, title, keywords, description)
ADS = {
    "running": (
        "e2e-trail-shoes",
        "Trailhead Running",
        "Trail shoes that grip",
        ["trail running", "running shoes", "ultramarathon training"],
        "Lightweight trail running shoes with lugged soles for wet, rocky trails.",
    ),
    "pets": (
        "e2e-dog-food",
        "Happy Hound Kitchen",
        "Fresh food picky dogs finish",
        ["dog food", "picky eater dogs", "kibble"],
        "Gently cooked dog food delivered to your door, for dogs who refuse kibble.",
    ),
    "cooking": (
        "e2e-skillet",
        "Cast & Copper",
        "Cast iron that sears like a steakhouse",
        ["cast iron skillet", "searing steak", "cooking at home"],
        "A pre-seasoned cast iron skillet for a perfect sear on steak and vegetables.",
    ),
    "coffee": (
        "e2e-espresso",
        "Crema Co",
        "Cafe espresso without the cafe line",
        ["espresso machine", "latte at home", "coffee beans"],
        "A compact espresso machine with a steam wand for lattes at home.",
    ),
}


def ad_id(topic: str) -> str:
    return ADS[topic][0]


def landing(topic: str) -> str:
    """The ad's click_through_url; the coffee advertiser asks for the click id (macro)."""
    url = f"https://{topic}.example/go?ad={ad_id(topic)}&utm_source=e2e"
    return url + "&click={click_id}" if topic == "coffee" else url


def trackers(pixel_base: str, topic: str) -> list[dict]:
    ad = ad_id(topic)
    kinds = ("click", "impression", "viewable") if topic == "pets" else ("impression",)
    # The click tracker first: a tag that wrongly fired it on view would ask for it first.
    return [
        {
            "vendor": "e2e-verify",
            "tracker_type": kind,
            "url": f"{pixel_base}/px/{ad}" + ("" if kind == "impression" else f"/{kind}"),
        }
        for kind in kinds
    ]


def catalogue(pixel_base: str) -> dict:
    campaigns = []
    for topic, (ad, advertiser, title, keywords, description) in ADS.items():
        campaigns.append(
            {
                "id": f"cmp-{ad}",
                "advertiser_name": advertiser,
                "status": "active",
                "start_at": "2026-01-01T00:00:00Z",
                "end_at": None,
                "budget_usd": 100000,
                "ad_sets": [
                    {
                        "id": f"as-{ad}",
                        "products": ["ugc", "ai"],
                        "pricing_model": {"type": "cpm", "bid_amount": 4.0},
                        "ads": [
                            {
                                "id": ad,
                                "title": title,
                                "cta": "Shop now",
                                "description": description,
                                "keywords": keywords,
                                "click_through_url": landing(topic),
                                "ttl_seconds": 900,
                                "pixel_trackers": trackers(pixel_base, topic),
                            }
                        ],
                    }
                ],
            }
        )
    return {"campaigns": campaigns}
