"""Synthetic demand and content for the benchmarks: catalogues of any size in the catalogue
file format, their ad vectors without embedding every ad, and posts.

Ads are variations on a few dozen real topics; each ad's vector is the real embedding of its
topic's ad text plus a little Gaussian noise, so a post about dog food is near the dog-food
ads of a 100k catalogue as it would be with real demand (the index, the candidate gates and
the ranking do their real work), while building 100k ads costs seconds, not an hour of model
time. Posts are made from topic sentences plus a unique detail, so no two are the same text
(no embedding-cache hit makes a figure look better than it is).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

ADS_PER_CAMPAIGN = 10
NOISE = 0.024  # per-dimension sigma: cosine ~0.9 between an ad and its topic's text


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    title: str
    description: str
    keywords: tuple[str, ...]
    sentences: tuple[str, ...]  # what people post about it, none naming the product


TOPICS = (
    Topic(
        "dog-food",
        "Grain-free dog food",
        "Healthy kibble picky dogs love.",
        ("dog food", "kibble"),
        (
            "my pup refuses to touch his dinner again",
            "the vet says his coat looks dull",
            "tried mixing in some chicken but he just sniffs it",
            "he used to love mealtime",
            "our rescue terrier is so fussy about what goes in his bowl",
        ),
    ),
    Topic(
        "trail-running",
        "Trail shoes that grip",
        "Trail running shoes for wet rocky ground.",
        ("trail running", "running shoes"),
        (
            "slipped twice on the muddy descent this morning",
            "my knees hate the rocky switchbacks",
            "signed up for a twenty mile mountain race",
            "the creek crossing soaked my feet",
            "trying to get faster on technical downhills",
        ),
    ),
    Topic(
        "coffee",
        "Single-origin coffee beans",
        "Fresh roasted beans delivered weekly.",
        ("coffee", "espresso"),
        (
            "my morning pour over tasted sour today",
            "dialing in the grinder is driving me mad",
            "I need something stronger to wake up before work",
            "the cafe down the street closed",
            "thinking about buying a proper burr grinder",
        ),
    ),
    Topic(
        "home-office",
        "Ergonomic office chair",
        "Lumbar support for long days at the desk.",
        ("office chair", "ergonomic"),
        (
            "my lower back aches after a day at the desk",
            "working from the kitchen table again",
            "video calls all afternoon and my neck is stiff",
            "my posture is terrible lately",
            "setting up a corner of the spare room to work in",
        ),
    ),
    Topic(
        "baking",
        "Stand mixer for bakers",
        "Knead bread dough without tired arms.",
        ("baking", "stand mixer"),
        (
            "my sourdough came out flat and dense",
            "kneading brioche by hand took forever",
            "the cookies spread all over the tray",
            "making a birthday cake for my daughter",
            "proofing the dough overnight in the fridge",
        ),
    ),
    Topic(
        "gardening",
        "Organic vegetable seeds",
        "Heirloom seeds for a thriving garden.",
        ("gardening", "seeds"),
        (
            "the tomatoes on my balcony are finally turning red",
            "slugs ate all my lettuce",
            "planning the raised beds for spring",
            "my basil keeps wilting in the heat",
            "composting the kitchen scraps this year",
        ),
    ),
    Topic(
        "camping",
        "Lightweight backpacking tent",
        "Two-person tent under two kilos.",
        ("camping", "tent"),
        (
            "it rained all night and everything got wet",
            "hiking into the backcountry next week",
            "our old shelter is so heavy to carry",
            "stars were incredible by the lake",
            "looking for a quiet spot to pitch near the ridge",
        ),
    ),
    Topic(
        "cycling",
        "Carbon road bike",
        "Fast, light road bikes for long rides.",
        ("cycling", "road bike"),
        (
            "did a hundred kilometres on Sunday with the club",
            "the climb up the pass hurt",
            "my old frame feels sluggish on the flats",
            "commuting by bike twice a week now",
            "cleaned the chain and it still squeaks",
        ),
    ),
    Topic(
        "skincare",
        "Gentle daily moisturiser",
        "Hydration for dry, sensitive skin.",
        ("skincare", "moisturiser"),
        (
            "winter wind leaves my cheeks red and flaky",
            "my face feels tight after washing",
            "trying a simpler routine before bed",
            "sunscreen makes me break out",
            "the heating at work dries everything out",
        ),
    ),
    Topic(
        "gaming",
        "Wireless gaming headset",
        "Low-latency audio for every match.",
        ("gaming", "headset"),
        (
            "my squad could not hear my callouts last night",
            "ranked matches all weekend",
            "the new season dropped and I am hooked",
            "footsteps are impossible to hear",
            "streaming with friends after work",
        ),
    ),
    Topic(
        "travel",
        "Carry-on suitcase",
        "Cabin-size luggage that fits every airline.",
        ("travel", "luggage"),
        (
            "the airline charged me for my bag again",
            "two weeks backpacking through Portugal",
            "packing for a long weekend in the city",
            "my zipper broke at the airport",
            "trying to travel with only hand baggage",
        ),
    ),
    Topic(
        "guitar",
        "Beginner acoustic guitar",
        "Easy-playing guitars for new players.",
        ("guitar", "music lessons"),
        (
            "my fingertips hurt from practising chords",
            "learned my first song around the fire",
            "the strings buzz on the third fret",
            "want to play at my sister's wedding",
            "practising scales every evening",
        ),
    ),
    Topic(
        "yoga",
        "Non-slip yoga mat",
        "Grip and cushioning for every pose.",
        ("yoga", "mat"),
        (
            "I keep sliding in downward dog",
            "started a morning stretch routine",
            "my hamstrings are so tight",
            "the class was packed this evening",
            "breathing exercises help me sleep",
        ),
    ),
    Topic(
        "pets-cat",
        "Self-cleaning litter box",
        "Less scooping, fresher home.",
        ("cat", "litter"),
        (
            "the cat keeps going next to the tray",
            "two kittens and the smell is intense",
            "scooping every morning before work",
            "our tabby is very picky about her corner",
            "adopted a second cat from the shelter",
        ),
    ),
    Topic(
        "photography",
        "Mirrorless camera body",
        "Sharp photos in low light.",
        ("photography", "camera"),
        (
            "my night shots are all grainy",
            "shooting photos of birds in the park",
            "the autofocus hunts in the evening",
            "planning a sunrise shoot at the coast",
            "learning to edit my portraits",
        ),
    ),
    Topic(
        "cooking",
        "Cast-iron skillet",
        "Perfect sear, lifetime pan.",
        ("cooking", "skillet"),
        (
            "my steak never gets a proper crust",
            "the non-stick pan is peeling",
            "cooking dinner for eight on Saturday",
            "trying to make restaurant-style fries",
            "meal prep for the whole week",
        ),
    ),
)
_FILLER = ("honestly", "today", "again", "lately", "this week", "at last", "for real", "somehow")
_NAMES = ("Alder", "Birch", "Cedar", "Dune", "Ember", "Fjord", "Grove", "Harbor", "Iris", "Juniper")


def ad_text(topic: Topic, variant: int) -> tuple[str, str]:
    """(title, description) of one ad of ``topic``."""
    brand = f"{_NAMES[variant % len(_NAMES)]} {variant // len(_NAMES)}"
    return f"{topic.title} by {brand}", topic.description


def catalogue_dict(ads: int, seed: int = 7) -> dict:
    """A valid catalogue file of ``ads`` ads in campaigns of ten."""
    rng = random.Random(seed)
    campaigns = []
    for c in range((ads + ADS_PER_CAMPAIGN - 1) // ADS_PER_CAMPAIGN):
        items = []
        for k in range(min(ADS_PER_CAMPAIGN, ads - c * ADS_PER_CAMPAIGN)):
            i = c * ADS_PER_CAMPAIGN + k
            topic = TOPICS[i % len(TOPICS)]
            title, description = ad_text(topic, i // len(TOPICS))
            items.append(
                {
                    "id": f"ad-{i}",
                    "title": title,
                    "cta": "Shop now",
                    "description": description,
                    "keywords": list(topic.keywords),
                    "click_through_url": f"https://shop.example/{topic.name}/{i}",
                    "ttl_seconds": 900,
                    "pixel_trackers": [],
                }
            )
        campaigns.append(
            {
                "id": f"cmp-{c}",
                "advertiser_name": f"Advertiser {c}",
                "status": "active",
                "start_at": "2026-01-01T00:00:00Z",
                "end_at": None,
                "budget_usd": 100000,
                "ad_sets": [
                    {
                        "id": f"as-{c}",
                        "products": ["ugc", "ai"],
                        "pricing_model": {
                            "type": "cpm" if c % 2 else "cpc",
                            "bid_amount": round(rng.uniform(0.5, 5.0), 2),
                        },
                        "ads": items,
                    }
                ],
            }
        )
    return {"campaigns": campaigns}


def write_catalogue(path: Path, ads: int) -> Path:
    path.write_bytes(orjson.dumps(catalogue_dict(ads)))
    return path


def ad_vectors(embed, placements, seed: int = 11) -> np.ndarray:
    """Vectors for ``placements`` (a catalogue's, in its order): each ad's topic text embedded
    once, plus noise, normalised."""
    by_title = {t.title: t for t in TOPICS}
    topic_texts = [f"{t.title}. {t.description} {' '.join(t.keywords)}" for t in TOPICS]
    base = np.asarray(embed(topic_texts), dtype=np.float32)
    index = {t.name: i for i, t in enumerate(TOPICS)}
    rows = []
    for p in placements:
        topic = by_title[p.ad.title.split(" by ", 1)[0]]
        rows.append(index[topic.name])
    rng = np.random.default_rng(seed)
    vectors = base[np.asarray(rows)] + rng.normal(0, NOISE, (len(rows), base.shape[1]))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def posts(count: int, *, chars: int | None = None, words: int = 40, seed: int = 0) -> list[str]:
    """``count`` distinct posts: about ``words`` words each, or ``chars`` characters."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        topic = TOPICS[rng.randrange(len(TOPICS))]
        parts: list[str] = []
        target = chars or 0
        while (len(" ".join(parts)) < target) if chars else (len(" ".join(parts).split()) < words):
            parts.append(rng.choice(topic.sentences) + (f" {rng.choice(_FILLER)}."))
        text = f"Post {seed}-{n}: " + " ".join(parts)
        text = text[:chars] if chars else " ".join(text.split()[:words])
        out.append(text)
    return out
