"""Brand safety: news, tragedy and self-harm get no ad; everyday money and health posts do.

Classes of unsafe content (``UNSAFE_CLASSES``):

- ``self_harm``: suicidal ideation and self-injury in any wording ("not waking up", "everyone
  better off without me", goodbye notes, cutting, overdose or method questions), with or
  without ordinary commercial text before or after it;
- ``violence_crime``: shootings, stabbings, assault, abuse, murder and its trials;
- ``disaster_war``: disasters, accidents, war and terror;
- ``death_grief``: a death and the grief after it (people and pets);
- ``news``: hard news: politics, elections, markets in turmoil, outbreaks, layoffs news.

Deliberately served: idioms ("to die for", "killer deal", "my phone died"), games and sports
language, hobbies (photo shoots, dying plants, true-crime books), and sensitive but
commercial topics: debt, mortgages, insurance, pain, sleep, acne, injury recovery, a job lost
with a career change, planning one's own funeral or will.

Three checks, any one blocks:

1. A lexicon of phrases that are unsafe in every use ("death toll", "passed away", "kill
   myself"). Words with everyday senses ("kill", "shoot", "dying", "funeral", "suicides" as a
   running drill) are left to the model.
2. Small MLPs (numpy only, one hidden layer, 6 classes; a few fitted from different seeds,
   their probabilities averaged) applied to the whole text and to each of its sentences. A
   unit's input is its MiniLM vector (mean of the token states), the element-wise maximum
   of its token states, the mean token state of two inner layers (the last layer places
   texts by topic; the inner ones keep more of how a thing is said, so an everyday worry
   and a line of despair sit further apart there), and hashed word unigrams and bigrams (so
   "kill myself" and "killer deal" stay apart however close their meanings average out).
   All of it comes from the one forward pass the matcher already runs for relevance. A
   class blocks when its probability on the text or on any one sentence reaches that
   class's threshold, so one unsafe sentence in a long post is found. Each kind of unit may
   have thresholds of its own (``limits``): the whole text, a sentence as it reads in the
   text, a sentence encoded alone by the second pass (a sentence's vector in context is
   diluted by its neighbours both ways). The shipped thresholds are one per name for all
   kinds. Weights and thresholds come from ``matcher.safety_train`` and ship in
   ``data/safety_model.npz`` with the hash of the rows they were fitted on.
3. A nearest-neighbour margin for self-harm (``knn_margin``): per unit, how much closer its
   MiniLM vector is to labelled self-harm exemplars than to safe ones. It reads intent from
   meaning alone, so an oblique wording whose words the MLPs never saw ("handing my things
   out, I won't need them") still lands near the exemplars it resembles. Its threshold
   (``self_harm_knn``) is chosen with the others from out-of-fold scores; the exemplars are
   built from the labelled rows on each machine into ``data/safety_exemplars.npz``.

A second pass (``judge``) reads what the first one dilutes: a sentence's token states in
the whole text's forward pass are mixed with its neighbours', so a self-harm line followed by
a shopping question reads partly as shopping. When the first pass lets a text of two or more
scored sentences through but any unit's self-harm probability or margin reaches a lower
suspicion level (``suspect_self_harm``, ``suspect_knn``, chosen from out-of-fold scores),
its (at most ``MAX_ALONE``) most suspicious sentences are encoded alone, every such sentence
of a request in one call, and judged as short texts with the same models and thresholds.
The middle of a long text, which the model's window does not read, is screened by the words
unsafe sentences are made of, and its (at most ``MAX_UNREAD``) most suspicious sentences are
judged alone the same way (``unread_middle``).

An AI turn's prompt and answer are judged together (``judge``'s ``turns``): self-harm is
the user's own thoughts, so the answer is read for self-harm only when the prompt shows some
self-harm evidence itself; the lexicon and the other classes read every answer.

A verdict names the class that blocked and the sentence it read there (sandbox ``explain``),
whether that sentence was judged alone, and whether its self-harm scores counted.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from io import BytesIO
from typing import Any

import numpy as np
import orjson

from matcher.embeddings import Sentences, split_sentences
from matcher.index import Int8Rows
from matcher.model_graph import LAYER_OUTPUTS

MODEL_FILE = "safety_model.npz"
# Built on each machine from the labelled rows by ``make install`` (not kept in git).
EXEMPLAR_FILE = "safety_exemplars.npz"
BUILD_EXEMPLARS = (
    "build it with `make install` or `python -m matcher.safety_train --exemplars-only`"
)
KNN_K = 3  # the margin compares the mean of the 3 nearest exemplars on each side
DIM = 384
NGRAM_DIM = 2048
INNER = DIM * len(LAYER_OUTPUTS)  # the inner layers' means (``Sentences.layers``)
DENSE = 2 * DIM + INNER  # the dense part of a unit's features; the hashed n-grams follow
FEATURES = DENSE + NGRAM_DIM
_WORD = re.compile(r"[a-z0-9']+", re.IGNORECASE)
MIN_SENTENCE_WORDS = 4
CLASSES = ("safe", "self_harm", "violence_crime", "disaster_war", "death_grief", "news")
UNSAFE_CLASSES = CLASSES[1:]
# The second pass's suspicion levels (threshold names): self-harm probability and margin.
SUSPECT_SELF_HARM = "suspect_self_harm"
SUSPECT_KNN = "suspect_knn"
# What a threshold is set on: P(any unsafe class), each unsafe class's probability, and the
# self-harm margin. Each may be set apart for a sentence as it reads in context
# (``name@sentence``) and for one encoded alone (``name@alone``).
NAMES = ("unsafe", *UNSAFE_CLASSES, "self_harm_knn")
_SELF_HARM = NAMES.index("self_harm")
# What blocked a text (``SafetyVerdict.evidence``): a lexicon phrase; a class's probability or
# P(any unsafe class); the self-harm margin alone; or the margin alone on a text of fewer than
# ``SHORT_TEXT_WORDS`` words. A margin compares distances to the self-harm and to the safe
# exemplars, so a text the model barely reads ("hi", "lol", "tell me a joke") lands near 0.5
# whichever it is: on such a text the margin blocks (short self-harm wordings such as "kill
# me" or "i'm done" have nothing else), but it is weaker evidence than any other, and the
# edge holds an AI conversation on it only when the assistant's answer confirms it.
EVIDENCE = ("lexicon", "model", "margin", "margin_short")
# Every self-harm text of the labelled, independent, fresh, stress and probe sets that only
# the margin blocks has six words or more ("don't want to wake up tomorrow").
SHORT_TEXT_WORDS = 6
SENTENCE = "sentence"
ALONE = "alone"
# The second pass encodes at most this many sentences of a text: the ones with the most
# self-harm evidence in context (``alone_order``). Encoded alone, one short sentence costs
# about 45% of a 40-word post's forward pass, two about 65%, three about 80%. Out of fold and
# on the held-out and independent rows, a third sentence caught nothing that the first two
# missed; one alone loses a held-out self-harm post.
MAX_ALONE = 2
# The model reads a bounded window of a long text (its head and its tail), so a sentence in
# the middle of a long post or page is read by the lexicon alone. Of those, the ones that use
# the words unsafe sentences are made of (``_UNREAD_CUES``) are encoded alone and judged as
# the second pass judges a sentence: at most this many per text, those with the most such
# words. A text the window reads whole pays nothing, and one whose middle has none of the
# words pays one regex search.
MAX_UNREAD = 2
# A sentence of the middle longer than this many words is read in pieces of this size, as
# the window cuts long sentences (a page without punctuation is one long "sentence").
_UNREAD_PIECE_WORDS = 40
_UNREAD_CUES = re.compile(
    r"\b(?:die|dying|died|dead|death|deaths|kill(?:s|ed|ing)?|suicid\w*|overdos\w*|"
    r"pills|noose|rope|razor|blade|wrists?|bleed\w*|end (?:it|it all|things|my life|everything)|"
    r"goodbye|letters? to|note to|not (?:come|coming) back|(?:wake|waking) up|disappear\w*|"
    r"vanish\w*|hopeless|worthless|burden|alive|myself|hurt(?:ing)?|harm\w*|starv\w*|"
    r"jump(?:ing)?|bridge|funeral|grave|murder\w*|shoot\w*|shot|gun\w*|stab\w*|"
    r"bomb\w*|attack\w*|victims?|massacre|hostages?|wounded|injured|killer|"
    # Self-injury and a life being wound up, which use none of the words above: "cutting my
    # arms again ... long sleeves", "giving away my things, I will not need them".
    r"cut(?:ting)?|cuts|scars?|sleeves|(?:giv(?:e|ing)|gave) away|"
    r"(?:won'?t|wont|will not|would not|wouldn'?t) need|not (?:be )?(?:here|around)|be gone|"
    r"last (?:time|goodbye|meal)|tired of (?:living|life|everything|it all)|"
    r"can'?t (?:go on|do this any)|better off|miss me|plan (?:is|to)|sleep forever)\b"
)
# Texts -> (vectors, sentences), as ``MiniLM.encode`` gives them.
Encode = Callable[[Sequence[str]], tuple[np.ndarray, list[Sentences]]]

# (class, pattern): phrases unsafe wherever they appear.
_LEXICON: tuple[tuple[str, str], ...] = (
    (
        "self_harm",
        r"suicidal|(?:commit(?:ted|ting)?|attempt(?:ed)?) suicide|"
        r"suicide (?:note|letter|attempt|plan|hotline|crisis|prevention|watch)|"
        r"kil+(?:ing)? ?my ?self|end(?:ing)? my (?:own )?life|take my (?:own )?life|"
        r"took (?:his|her|their) own life|self[- ]harm(?:ing|ed)?|unaliv(?:e|ed|ing)|"
        r"(?:took|take|taking) an overdose|overdos(?:e|ed|ing) on purpose|"
        # An overdose as a quiet way out ("overdose on tylenol and just fall asleep").
        r"overdos(?:e|ing) on [a-z0-9' ]{1,40}? and (?:just (?:fall asleep|go to sleep|drift "
        r"off)|(?:never|not) wake up)|"
        r"(?:wish|hope) i (?:was|were) dead|better off without me|"
        r"no reason to (?:keep )?(?:living|live)|"
        # First-person wordings and their slang spellings ("sewerslide", "kys"); none has an
        # everyday sense. "kms" stays out (kilometres), as do "want to die" and "end it all"
        # said alone (hyperbole, a finale) and "overdose" alone ("can you overdose on
        # vitamin D?" is a health question).
        r"sewer ?slid(?:e|ing)|kys\b|sui thoughts|hang(?:ing)? myself|"
        r"(?:slit|slash|cut)(?:ting)? my (?:wrists?|throat)|"
        r"(?:i|i'?m|im|i am) (?:wanna|want to|going to|gonna|ready to|about to|planning to|"
        r"(?:have )?decided to) end it all|"
        r"(?:to|gonna|wanna) off myself|offing myself|"
        r"(?:do ?n[o']?t|dont|no longer) want to (?:be alive|exist any ?more|live any ?more)|"
        r"(?:i'?d|i would|i'?m|im|i am) (?:be )?better off dead|"
        # Hoping not to wake up, said to the end of its clause: "... wake up the baby", "...
        # wake up in pain" and "... wake up tomorrow with a headache" are everyday worries.
        r"(?:hop(?:e|ing)|wish(?:ing)?|pray(?:ing)?) (?:that )?i "
        r"(?:never|don'?t|do not|won'?t|will not|wouldn'?t|would not) wake up"
        r"(?: +(?:tomorrow|again|ever again|ever|any ?more|in the morning|one day|this time|"
        r"at all))?(?= *(?:[.!?,;:)]|$|(?:and|or|but|so|because|cause|cuz)\b))|"
        # Ending it all as a thought or a feeling of one's own ("thinking about ending it
        # all"); a finale "ending it all" has no thinker.
        r"(?:thinking|thinkin|thought|think) (?:about|of) ending it all|"
        r"(?:i|i'?m|im|i am) (?:just )?(?:feel|feeling) like ending it all|"
        r"(?:considering|contemplating) ending it all|"
        # "kms" only as a verb ("wanna kms", "ima kms") or as a clause of its own ("im so
        # done. kms."); "10 kms" and "kms of trail" are distances.
        r"(?:wanna|want to|gonna|going to|about to|ima|imma|i'?ll|i will|finna|tryna|bouta|"
        r"might as well|might just|should just|ready to|need to) kms\b|"
        r"(?:^|(?<=[.!?;\n] )|(?<=[.!?;\n]))kms(?= *(?:[.!?;)]|$|\n|lol\b|lmao\b|fr\b|rn\b|"
        r"tbh\b|ngl\b|honestly\b|already\b))|"
        # Self-injury: the words, or hurting oneself on purpose ("cut myself" alone is
        # shaving or chopping onions).
        r"self[- ]injur(?:y|e|ed|es|ing|ious)|self[- ]mutilat(?:e|ed|es|ing|ion)|"
        r"(?:harm|harming|harmed|hurt|hurting|cut|cutting|burn|burning|burnt|burned) myself "
        r"(?:on purpose|deliberately|intentionally|to cope|to feel)|"
        # Life not worth going on with, said of one's own ("tired of living paycheck to
        # paycheck" and "a life without coffee" are not).
        r"can'?t (?:go on|keep on|keep) living|cannot (?:go on|keep on|keep) living|"
        r"my life (?:isn'?t|is not|ain'?t|is no longer) worth living|"
        r"(?:tired|sick) of being alive|wish i (?:was|were|had|'d) never (?:been )?born|"
        # Tired of existing at all (passive ideation; "tired of existing in this flat" is a
        # complaint about the flat and is not matched), a rope bought with
        # something to stand on, and a life insurance asked whether it pays for a suicide.
        r"(?:tired|sick|exhausted) of existing(?! (?:in|as|on|at|like|with|without|under|"
        r"among|around|for)\b)|"
        r"(?:bought|got|buying|getting) (?:a |some )?rope and (?:a )?(?:stool|chair)|"
        r"suicide clause|(?:pays?|paid|payout|cover(?:s|ed)?) (?:out )?(?:on |for )?suicide|"
        r"(?:sleep|fall asleep|go to sleep) and (?:never|not) wake up|"
        r"(?:no|what'?s the|whats the) point (?:of |in )?(?:being alive|staying alive|"
        r"living any ?more|going on living)|"
        r"better off if i (?:was|were|wasn'?t|weren'?t) (?:gone|dead|here|around|alive)|"
        # Method wordings with no everyday sense.
        r"(?:swallow(?:ed|ing)?|took|take|taking|down(?:ed|ing)?) (?:a|an|the) "
        r"(?:whole|entire) (?:bottle|pack|packet|box) of (?:pills|tablets|meds|"
        r"sleeping pills|painkillers)|"
        r"overdos(?:e|ed|ing) on (?:my|all my|all of my) (?:pills|meds|medications?|tablets|"
        r"antidepressants)|"
        r"shoot myself in the (?:head|face|mouth)|toaster bath|"
        r"(?:(?:thinking|thinkin|thought|think) (?:about|of) (?:jumping|stepping|walking|"
        r"throwing myself)|(?:throw|throwing|threw) myself) in front of (?:a|an|the) "
        r"(?:train|bus|truck|lorry|car|subway)|"
        r"(?:throw|throwing|threw) myself (?:off|from) (?:a|the|my) (?:bridge|building|roof|"
        r"balcony|cliff|overpass)|"
        # No point in going on, said to the end of its clause ("no point going on with the
        # hike in this rain" is a plan).
        r"(?:(?:there'?s|theres|there is|see|is) )?no point (?:in )?(?:going on|carrying on)"
        r"(?= *(?:[.!?,;:)]|$|any ?more\b|(?:and|but|so|because|cause|cuz)\b))|"
        # The same first-person wishes in the languages the model does not read: Hindi and
        # Hinglish ("mujhe marna hai": I want to die; "khudkushi", "aatmahatya": suicide),
        # Spanish, Portuguese, French, German and Italian. A hyperbole's cause ("de risa",
        # "of laughing") keeps "I want to die" with the model, as in English.
        r"khud ?kushi|aatm?ahatya|\u0906\u0924\u094d\u092e\u0939\u0924\u094d\u092f\u093e|"
        r"(?:mujhe|main|mai|me) (?:bas )?marna (?:hai|chahta|chahti)|"
        r"marna chah(?:ta|ti) (?:hu|hoon|hun)|jeena nahi chah(?:ta|ti)|"
        r"(?:khud ko|apne aap ko) (?:maar|mar) (?:dalunga|dalungi|dena|du|doon)|"
        r"(?:quiero|quisiera) (?:morir(?:me)?|suicidarme|matarme)(?! de )|"
        r"me (?:quiero|voy a) (?:morir|matar|suicidar)(?! de )|quitarme la vida|"
        r"no quiero (?:seguir )?vivir|"
        r"quero morrer(?! de )|(?:vou|quero) me matar|me suicidar|"
        r"n[aã]o quero mais viver|tirar (?:a )?minha (?:pr[oó]pria )?vida|"
        r"je veux mourir(?! de )|envie de mourir|me suicider|mettre fin [aà] mes jours|"
        r"ich (?:will|m[oö]chte) (?:nur noch )?sterben|will nicht mehr leben|"
        r"mich umbringen|mir das leben nehmen|"
        r"voglio morire(?! dal| di )|uccidermi|togliermi la vita",
    ),
    ("disaster_war", r"death toll|killed in (?:a|an|the) (?:crash|fire|attack|blast|explosion)"),
    (
        "disaster_war",
        r"terror(?:ist)? attack|suicide bomb(?:er|ing)?|car bomb|missile strikes?|"
        r"shelling of|massacre (?:of|in|at)|massacred|genocide|war crimes?|refugees? fleeing|"
        r"ceasefire",
    ),
    (
        "disaster_war",
        # "looks like a tornado hit it" is a messy room, not a disaster.
        r"(?<!like a )(?<!like an )"
        r"(?:earthquake|tsunami|hurricane|tornado(?:es)?|wildfires?|flood(?:s|ing|waters)?|"
        r"blizzard|landslide|eruption) (?:hit|hits|struck|strikes|tore|killed|kills|destroyed|"
        r"swept|made landfall|leveled|flattened|victims)|magnitude \d|tsunami warning|"
        r"evacuation orders?|state of emergency|plane crash|train derail|derailed|"
        r"(?:fatal|deadly) (?:crash|collision|fire|accident|blast)",
    ),
    (
        "violence_crime",
        r"mass shooting|gunm[ae]n|opened fire (?:on|at|in)|shot (?:dead|and killed)|"
        r"fatally (?:shot|stabbed|injured|wounded)|stabbed to death|beaten to death|"
        r"charged with (?:murder|assault|manslaughter)|manslaughter|indicted|"
        r"(?:\d+|dozens|hundreds|thousands|several) (?:people|persons|civilians|children|"
        r"students|workers|passengers) (?:were |are )?(?:killed|dead|injured|wounded)",
    ),
    (
        "death_grief",
        # "Obituary" stays out: drafting one's own is part of pre-planning a funeral, which
        # serves.
        r"passed away|laid to rest|in loving memory|in memoriam|"
        r"stillb(?:orn|irth)|miscarr(?:iage|ied)|diagnosed with terminal|"
        r"lost (?:my|our|his|her) (?:battle|fight) with|"
        # A pet put down (euthanised); "put my puppy to sleep at night" is bedtime, and
        # "put to sleep for the dental cleaning" an anaesthetic.
        r"(?:dog|cat|pet|puppy|kitten|horse|bunny|rabbit)s? (?:was|were|got|had to be|"
        r"is being|being) put (?:down|to sleep)(?! for\b)|"
        r"(?:had to|have to|going to|decided to) put (?:our|my|the) (?:old |sweet |beloved )?"
        r"(?:dog|cat|pet|puppy|kitten|horse|bunny|rabbit) (?:down|to sleep)(?! for\b)",
    ),
    (
        "news",
        r"breaking news|\bbreaking:|authorities said|police said|impeach|recession fears|"
        r"stock market (?:crash|plunge)|markets? (?:plunged|tumbled|crashed)|"
        r"election (?:results|fraud)",
    ),
)
# The phrases are lower case and are matched against the lower-cased text: one alternation
# this long costs about three and a half times as much per text when it is compiled
# case-insensitive (104 against 30 us for a 40-word post, 4.5 against 1.2 ms for 10,000
# characters).
_LEXICON_ANY = re.compile(r"\b(?:" + "|".join(p for _, p in _LEXICON) + r")")
_LEXICON_CLASS = [(c, re.compile(r"\b(?:" + p + r")")) for c, p in _LEXICON]


def lexicon_hit(text: str) -> tuple[str, str, tuple[int, int]] | None:
    """(class, matched phrase, its span) of the first lexicon phrase in ``text``, if any."""
    lower = text.lower()
    if len(lower) != len(text):
        # A few characters lower-case to two ("İ"); keep those as they are so that a span
        # in the lower-cased text is the same span in ``text``. No phrase contains them.
        lower = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
    m = _LEXICON_ANY.search(lower)
    if m is None:
        return None
    for cls, pattern in _LEXICON_CLASS:
        if pattern.match(lower, m.start()):
            return cls, m.group(0), m.span()
    return "news", m.group(0), m.span()  # unreachable: every phrase has a class


def ngram_vector(text: str) -> np.ndarray:
    """Hashed (CRC-32) word unigrams and bigrams of ``text``, present/absent, L2-normalised."""
    words = _WORD.findall(text.lower())
    grams = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
    v = np.zeros(NGRAM_DIM, np.float32)
    if grams:
        v[[zlib.crc32(g.encode()) % NGRAM_DIM for g in grams]] = 1.0
        v /= np.linalg.norm(v)
    return v


def unit_features(text: str, vector: np.ndarray, sentences: Sentences | None) -> np.ndarray:
    """(1 + scored sentences, FEATURES): row 0 the whole text, then one row per sentence of
    at least ``MIN_SENTENCE_WORDS`` words (a two-word aside such as "Genuinely curious" is too
    little text to judge alone; the whole-text row still reads it)."""
    kept = [] if sentences is None else scored_sentences(sentences)
    out = np.zeros((1 + len(kept), FEATURES), np.float32)
    out[0] = text_features(text, vector, sentences)
    if sentences is not None:
        for row, i in enumerate(kept, start=1):
            out[row, :DIM] = sentences.vectors[i]
            out[row, DIM : 2 * DIM] = sentences.peaks[i + 1]
            if sentences.layers is not None:
                out[row, 2 * DIM : DENSE] = sentences.layers[i + 1]
            out[row, DENSE:] = ngram_vector(sentences.texts[i])
    return out


def text_features(text: str, vector: np.ndarray, sentences: Sentences | None) -> np.ndarray:
    """The whole text's row of ``unit_features`` alone (a sentence judged on its own)."""
    out = np.zeros(FEATURES, np.float32)
    out[:DIM] = vector
    out[DENSE:] = ngram_vector(text)
    if sentences is not None:
        out[DIM : 2 * DIM] = sentences.peaks[0]
        if sentences.layers is not None:
            out[2 * DIM : DENSE] = sentences.layers[0]
    return out


def unread_middle(text: str, window: Sentences | None) -> list[str]:
    """The (at most ``MAX_UNREAD``) sentences of ``text`` that its window did not read and
    that use the most of the words unsafe sentences are made of, in text order."""
    if window is None or not window.texts:
        return []
    seen = [" ".join(t.split()) for t in window.texts]
    if sum(map(len, seen)) + len(seen) > len(" ".join(text.split())):
        return []  # the window read it all
    read = set(seen)
    found: list[tuple[int, int, str]] = []
    for a, b in split_sentences(text):
        words = text[a:b].split()
        for k in range(0, len(words), _UNREAD_PIECE_WORDS):
            piece = " ".join(words[k : k + _UNREAD_PIECE_WORDS])
            if piece in read or len(_WORD.findall(piece)) < MIN_SENTENCE_WORDS:
                continue
            cues = len(_UNREAD_CUES.findall(piece.lower()))
            if cues:
                found.append((-cues, len(found), piece))
    found.sort()
    return [piece for _, _, piece in sorted(found[:MAX_UNREAD], key=lambda f: f[1])]


def scored_sentences(sentences: Sentences) -> list[int]:
    """Indices of the sentences long enough to be judged on their own."""
    return [i for i, t in enumerate(sentences.texts) if len(_WORD.findall(t)) >= MIN_SENTENCE_WORDS]


@dataclass(frozen=True, slots=True)
class SafetyVerdict:
    safe: bool
    probability: float  # the highest P(any unsafe class) over the text and its sentences
    lexicon_hit: str | None  # the phrase that matched, if any
    category: str | None = None  # the class that blocked (None when safe)
    sentence: str | None = None  # the sentence where that class scored highest
    scores: dict[str, float] = field(default_factory=dict)  # class -> highest probability
    part: str | None = None  # which text of the request: content, prompt or answer
    second_pass: bool = False  # its sentences were also encoded and judged alone
    sentence_alone: bool = False  # ``sentence`` blocked as judged alone, not in context
    # False for an AI turn's answer after a prompt with no self-harm evidence: its self-harm
    # scores are shown but did not count (``SafetyClassifier.judge``).
    self_harm_read: bool = True
    # What blocked (None when safe): ``EVIDENCE``.
    evidence: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "safe": self.safe,
            "class": self.category,
            "sentence": self.sentence,
            "p_unsafe": round(self.probability, 4),
            "lexicon": self.lexicon_hit,
            "second_pass": self.second_pass,
            "sentence_alone": self.sentence_alone,
            "self_harm_read": self.self_harm_read,
            "evidence": self.evidence,
            "scores": {k: round(v, 4) for k, v in self.scores.items()},
        }


class SafetyClassifier:
    """``check(text, vector, sentences)``: unsafe when the lexicon fires or any class's
    probability, on the whole text or on one sentence, reaches that class's threshold (or
    P(any unsafe class) reaches the ``unsafe`` threshold)."""

    def __init__(
        self,
        models: list[list[tuple[np.ndarray, np.ndarray]]] | None,
        thresholds: dict[str, float] | None = None,
        meta: dict[str, Any] | None = None,
        exemplars: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """``models``: MLPs whose probabilities are averaged, each a list of (weights, bias)
        layers; None: the lexicon alone (a fallback for tests and tools). ``exemplars``:
        (self-harm, safe) unit vectors for the nearest-neighbour margin (``knn_margin``);
        None: no margin (the ``self_harm_knn`` threshold then never fires)."""
        self.models = (
            None
            if models is None
            else [
                [(np.ascontiguousarray(w, np.float32), np.asarray(b, np.float32)) for w, b in m]
                for m in models
            ]
        )
        self.thresholds = dict(thresholds or {})
        # ``limits(self.thresholds)`` and the thresholds it was built from (rebuilt when they
        # change: a verdict reads it, and building it costs more than the verdict's product).
        self._limits_of: tuple[tuple[tuple[str, float], ...], np.ndarray] | None = None
        self.meta = dict(meta or {})
        # Both sides' exemplars as the rows of one float32 matrix (self-harm first), and as
        # int8 codes for the approximate products that pick, per unit, the few exemplars
        # that may be among its nearest (``knn_margin``).
        self._exemplar_rows = np.empty((0, DIM), np.float32)
        self._exemplar_codes: Int8Rows | None = None
        self._harm_rows = 0
        if exemplars is not None:
            harm, safe = (np.asarray(e, np.float32).reshape(-1, DIM) for e in exemplars)
            self._exemplar_rows = np.ascontiguousarray(np.vstack([harm, safe]))
            self._harm_rows = len(harm)
            self._exemplar_codes = Int8Rows.of(self._exemplar_rows)
        if self.models is not None:
            # Every model's first layer side by side, split into the dense part (the two
            # vectors) and the hashed n-grams, which are looked up row by row: a text has a
            # few dozen n-grams out of thousands of buckets. einsum keeps this single-threaded
            # (no BLAS thread pool waking up for a few small products on the hot path).
            first = np.hstack([m[0][0] for m in self.models])
            self._dense = np.ascontiguousarray(first[:DENSE])
            self._grams = np.ascontiguousarray(first[DENSE:])
            self._bias = np.concatenate([m[0][1] for m in self.models])

    @classmethod
    def load(cls, raw: bytes | None = None, exemplars: bytes | None = None) -> SafetyClassifier:
        """The shipped model (``data/safety_model.npz`` and ``data/safety_exemplars.npz``), or
        one from the two files' bytes (``exemplars`` None with ``raw`` given: no margin)."""
        if raw is None:
            data = resources.files("matcher.data")
            raw = data.joinpath(MODEL_FILE).read_bytes()
            built = data.joinpath(EXEMPLAR_FILE)
            if not built.is_file():
                raise FileNotFoundError(f"{built} is missing: {BUILD_EXEMPLARS}")
            exemplars = built.read_bytes()
        pair, rows_sha256 = None, None
        if exemplars is not None:
            with np.load(BytesIO(exemplars), allow_pickle=False) as z:
                pair = (z["self_harm"].astype(np.float32), z["safe"].astype(np.float32))
                rows_sha256 = str(z["trained_on"]) if "trained_on" in z.files else ""
        with np.load(BytesIO(raw), allow_pickle=False) as z:
            meta = orjson.loads(str(z["meta"]))
            models = [
                [
                    (z[f"m{m}_w{i}"].astype(np.float32), z[f"m{m}_b{i}"].astype(np.float32))
                    for i in range(meta["layers"])
                ]
                for m in range(meta["models"])
            ]
        # Exemplars built from other rows than the model's would move the margin under
        # thresholds chosen for these ones.
        if rows_sha256 is not None and rows_sha256 != meta["trained_on"]["sha256"]:
            raise ValueError(f"the exemplars were built for another model: {BUILD_EXEMPLARS}")
        return cls(models, meta["thresholds"], meta, pair)

    @property
    def exemplars(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The (self-harm, safe) exemplar rows as held; None: no margin."""
        if self._exemplar_codes is None:
            return None
        rows, n = self._exemplar_rows, self._harm_rows
        return rows[:n], rows[n:]

    def knn_margin(self, features: np.ndarray) -> np.ndarray:
        """(n,) per unit: the mean cosine of its ``KNN_K`` nearest self-harm exemplars minus
        that of its ``KNN_K`` nearest safe ones, mapped from [-1, 1] to [0, 1]. Exemplars are
        training units (one per self-harm text: the sentence least like any safe unit; and
        the safe units nearest to self-harm), so a new wording close to a known one scores
        high even when its words are new to the MLPs."""
        codes = self._exemplar_codes
        if codes is None:
            return np.zeros(features.shape[0], np.float32)
        v = np.asarray(features[:, :DIM], np.float32)
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-6)
        # Approximate cosines with every exemplar from the int8 codes, then exact float32
        # cosines for the exemplars that may be among a unit's nearest: those within twice
        # the error bound of its k-th best approximate cosine (the k best approximate ones
        # are at least that minus the bound exactly, and every other exemplar is below it).
        # The margin is the one all exact cosines give, at about a tenth of their cost.
        approx, bound = codes.scores(v)
        sides = []
        for lo, hi in ((0, self._harm_rows), (self._harm_rows, len(self._exemplar_rows))):
            part = approx[:, lo:hi]
            k = min(KNN_K, hi - lo)
            kth = np.partition(part, hi - lo - k, axis=1)[:, hi - lo - k] if k else bound
            near = lo + np.flatnonzero((part >= (kth - 2 * bound)[:, None]).any(axis=0))
            sims = np.einsum("ij,kj->ik", v, self._exemplar_rows[near])
            sides.append(np.partition(sims, -k, axis=1)[:, -k:].mean(axis=1))
        out: np.ndarray = ((sides[0] - sides[1] + 1.0) / 2.0).astype(np.float32)
        return out

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """(n, len(CLASSES)) class probabilities of n units' features (``unit_features``)."""
        n = features.shape[0]
        out = np.zeros((n, len(CLASSES)), np.float32)
        if self.models is None:
            out[:, 0] = 1.0
            return out
        x = np.asarray(features, np.float32)
        hidden = np.einsum("ij,jk->ik", x[:, :DENSE], self._dense) + self._bias
        for i in range(n):
            grams = np.flatnonzero(x[i, DENSE:])
            if len(grams):
                hidden[i] += self._grams[grams].sum(axis=0) * x[i, DENSE + grams[0]]
        hidden = np.maximum(hidden, 0.0)
        width = hidden.shape[1] // len(self.models)
        for m, layers in enumerate(self.models):
            h = hidden[:, m * width : (m + 1) * width]
            for j, (w, b) in enumerate(layers[1:], start=1):
                h = np.einsum("ij,jk->ik", h, w) + b
                if j < len(layers) - 1:
                    h = np.maximum(h, 0.0)
            h = h - h.max(axis=1, keepdims=True)
            e = np.exp(h)
            out += e / e.sum(axis=1, keepdims=True)
        return out / len(self.models)

    def check(
        self, text: str, vector: np.ndarray, sentences: Sentences | None = None
    ) -> SafetyVerdict:
        """The verdict of the first pass alone: the whole text and its sentences as they sit
        in the text's one forward pass (``judge`` adds the second pass where it is due)."""
        return self._verdict(self._first_units(text, vector, sentences))

    def judge(
        self,
        texts: Sequence[str],
        vectors: np.ndarray,
        sentences: Sequence[Sentences | None],
        encode: Encode,
        turns: Mapping[int, int] | None = None,
    ) -> list[SafetyVerdict]:
        """One verdict per text, with the second pass where the first one is suspicious.

        ``turns``: for an AI turn's answer, answer index -> its prompt's index. Self-harm is
        the thoughts of the person writing, and in a turn that is the user: the answer can
        only echo the prompt. So an answer is read for self-harm (the MLPs' probability, the
        margin, and their share of P(any unsafe class)) only when its prompt shows some
        self-harm evidence itself (``self_harm_evidence``); otherwise a factual answer about
        pain, doses or debt is judged on the other classes alone. The lexicon reads every
        text whole either way.

        The first pass reads each sentence from the text's own forward pass, where its token
        states are mixed with the rest of the text: a self-harm line followed by a shopping
        question reads partly as shopping. When a text that the first pass lets through has
        two or more scored sentences and any unit's self-harm evidence reaches the lower
        suspicion levels (``suspect_self_harm`` on the MLPs' self-harm probability,
        ``suspect_knn`` on the margin), each scored sentence is encoded alone (``encode``,
        one call for every such sentence of every text) and judged as a short text of its
        own with the same models and thresholds; any such unit reaching a threshold blocks.
        """
        firsts = [self._first_units(t, vectors[i], sentences[i]) for i, t in enumerate(texts)]
        unread = {a for a, p in (turns or {}).items() if not self.self_harm_evidence(firsts[p])}
        verdicts = [self._verdict(u, i not in unread) for i, u in enumerate(firsts)]
        chosen: dict[int, list[str]] = {}
        for i, u in enumerate(firsts):
            if not verdicts[i].safe:
                continue
            if i not in unread and self.suspicious(u):
                chosen[i] = [u.texts[1 + j] for j in self.alone_order(u)]
            middle = unread_middle(texts[i], sentences[i])
            if middle:
                chosen[i] = chosen.get(i, []) + middle
        if not chosen:
            return verdicts
        due = list(chosen)
        alone = [s for i in due for s in chosen[i]]
        clean_vectors, clean_sentences = encode(alone)
        clean = iter(
            text_features(s, clean_vectors[j], clean_sentences[j]) for j, s in enumerate(alone)
        )
        for i in due:
            u = firsts[i]
            rows = np.stack([next(clean) for _ in chosen[i]])
            both = _Units(
                u.text,
                u.texts + tuple(chosen[i]),
                np.vstack([u.features, rows]),
                np.vstack([u.probs, self.probabilities(rows)]),
                np.concatenate([u.margin, self.knn_margin(rows)]),
                u.hit,
                first=len(u.texts),
            )
            verdicts[i] = self._verdict(both, i not in unread)
        return verdicts

    def suspicious(self, units: _Units) -> bool:
        """Whether a text is due for the second pass: two or more scored sentences and
        ``self_harm_evidence``."""
        return len(units.texts) >= 3 and self.self_harm_evidence(units)

    def self_harm_evidence(self, units: _Units) -> bool:
        """Whether any unit's self-harm probability or margin reaches its suspicion level
        (``suspect_self_harm``, ``suspect_knn``)."""
        if self.models is None:
            return False
        sh = CLASSES.index("self_harm")
        return bool(
            units.probs[:, sh].max() >= self.thresholds.get(SUSPECT_SELF_HARM, 2.0)
            or units.margin.max() >= self.thresholds.get(SUSPECT_KNN, 2.0)
        )

    def alone_order(self, units: _Units) -> list[int]:
        """The second pass's sentences (indices into the scored sentences, in text order): the
        ``MAX_ALONE`` whose self-harm evidence in context, each signal over its suspicion
        level, is highest."""
        return alone_order(
            units.probs[1:, CLASSES.index("self_harm")],
            units.margin[1:],
            self.thresholds.get(SUSPECT_SELF_HARM, 2.0),
            self.thresholds.get(SUSPECT_KNN, 2.0),
        )

    def _first_units(self, text: str, vector: np.ndarray, sentences: Sentences | None) -> _Units:
        features = unit_features(text, vector, sentences)
        kept = [] if sentences is None else scored_sentences(sentences)
        texts = (text, *(sentences.texts[i] for i in kept)) if sentences is not None else (text,)
        return _Units(
            text,
            texts,
            features,
            self.probabilities(features),
            self.knn_margin(features),
            lexicon_hit(text),
        )

    def _limits(self, n: int, first: int | None) -> np.ndarray:
        """(n, len(NAMES)) each unit's thresholds (``limits``): row 0 the whole text's, then
        the sentences' in context, then, from ``first`` on, the sentences' encoded alone."""
        key = tuple(self.thresholds.items())
        if self._limits_of is None or self._limits_of[0] != key:
            self._limits_of = (key, limits(self.thresholds))
        each = self._limits_of[1]
        out = np.empty((n, len(NAMES)), np.float32)
        out[0] = each[0]
        out[1:] = each[1]
        if first is not None:
            out[first:] = each[2]
        return out

    @staticmethod
    def _scores(probs: np.ndarray, margin: np.ndarray, harm: bool = True) -> np.ndarray:
        """(units, len(NAMES)): P(any unsafe class), each unsafe class's probability, and
        the self-harm margin; ``harm`` False: without self-harm (its probability, its share
        of P(any unsafe class) and the margin count as zero)."""
        out = np.empty((len(probs), len(NAMES)), np.float32)
        out[:, 0] = 1.0 - probs[:, 0]
        out[:, 1:-1] = probs[:, 1:]
        out[:, -1] = margin
        if not harm:
            out[:, 0] -= out[:, _SELF_HARM]
            out[:, _SELF_HARM] = 0.0
            out[:, -1] = 0.0
        return out

    def _verdict(self, u: _Units, harm: bool = True) -> SafetyVerdict:
        probs, margin, text = u.probs, u.margin, u.text
        best_unit = probs.argmax(axis=0)
        scores = {c: float(probs[best_unit[i], i]) for i, c in enumerate(CLASSES) if i}
        scores["self_harm_knn"] = float(margin.max())
        top = float(1.0 - probs[:, 0].min())
        second = u.first is not None
        hit = u.hit
        if hit is not None:
            cls, phrase, (a, _) = hit
            return SafetyVerdict(
                False,
                top,
                phrase,
                cls,
                _sentence_at(text, a),
                scores,
                self_harm_read=harm,
                evidence="lexicon",
            )
        # Each unit's scores over its own type's thresholds: the whole text, a sentence as it
        # reads in the text's forward pass, or a sentence encoded alone (second pass).
        ratio = self._scores(probs, margin, harm) / self._limits(len(probs), u.first)
        peak = ratio.max(axis=0).tolist()
        fired = [(peak[1 + j], c) for j, c in enumerate(UNSAFE_CLASSES) if peak[1 + j] >= 1.0]
        if peak[-1] >= 1.0:
            fired.append((peak[-1], "self_harm"))
        if not fired and peak[0] >= 1.0:
            # No single class is sure, but the text is unsafe: name the likeliest class.
            unit = int(ratio[:, 0].argmax())
            fired = [(1.0, UNSAFE_CLASSES[int(probs[unit, 1:].argmax())])]
        if not fired:
            return SafetyVerdict(
                True, top, None, None, None, scores, second_pass=second, self_harm_read=harm
            )
        _, cls = max(fired)
        k = CLASSES.index(cls)
        sentence = text
        alone = False
        by_margin = cls == "self_harm" and peak[k] < 1.0
        evidence = "model"
        if by_margin and peak[0] < 1.0:  # neither the class's probability nor P(unsafe)
            short = len(_WORD.findall(text)) < SHORT_TEXT_WORDS
            evidence = "margin_short" if short else "margin"
        if len(u.texts) > 1:
            # The unit whose score for the class stands highest over its threshold, or, when
            # only the margin fired, the one nearest to the self-harm exemplars: a sentence
            # (one judged alone by the second pass is named as such), or the whole text when
            # it reads more unsafe than any of its scored sentences.
            by = ratio[:, -1] if by_margin else ratio[:, k]
            unit = int(by.argmax())
            sentence = u.texts[unit]
            alone = u.first is not None and unit >= u.first
        return SafetyVerdict(
            False,
            top,
            None,
            cls,
            sentence,
            scores,
            second_pass=second,
            sentence_alone=alone,
            self_harm_read=harm,
            evidence=evidence,
        )


def limits(thresholds: dict[str, float]) -> np.ndarray:
    """(3, len(NAMES)) the thresholds of a whole text (``name``), of a sentence as it reads in
    the text (``name@sentence``) and of one encoded alone (``name@alone``). A sentence's
    threshold falls back to the whole text's, and a name with none never fires (2.0)."""
    whole = [thresholds.get(c, 2.0) for c in NAMES]
    rows = [whole]
    for kind in (SENTENCE, ALONE):
        rows.append([thresholds.get(f"{c}@{kind}", w) for c, w in zip(NAMES, whole, strict=True)])
    return np.array(rows, np.float32)


def alone_order(p_self_harm: np.ndarray, margin: np.ndarray, level: float, knn: float) -> list[int]:
    """Indices of the (at most ``MAX_ALONE``) sentences with the highest self-harm evidence:
    the larger of the probability over its suspicion level and the margin over its own."""
    evidence = np.maximum(p_self_harm / level, margin / knn)
    return sorted(np.argsort(-evidence, kind="stable")[:MAX_ALONE].tolist())


@dataclass(frozen=True, slots=True)
class _Units:
    """The units of one text as judged: row 0 the whole text, then its scored sentences in
    context, then (from ``first`` on, second pass only) the same sentences encoded alone."""

    text: str
    texts: tuple[str, ...]
    features: np.ndarray
    probs: np.ndarray
    margin: np.ndarray
    # The lexicon's hit on the whole text (``lexicon_hit``), found once in the first pass.
    hit: tuple[str, str, tuple[int, int]] | None
    first: int | None = None


def _sentence_at(text: str, pos: int) -> str:
    for a, b in split_sentences(text):
        if a <= pos < b:
            return text[a:b]
    return text
