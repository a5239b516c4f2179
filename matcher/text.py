"""The text the matcher reads: a post as its reader sees it, not as its bytes spell it.

Tricks that keep a word readable to a person but change its characters would otherwise
change what the model and the brand-safety lexicon see: "kill" in fullwidth letters, with an
invisible zero-width space inside it, spaced out as "k i l l", or with a Cyrillic "i" among
its Latin letters all read "kill". So before anything is embedded or judged, a text is:

- NFKC-normalised (fullwidth and other compatibility forms become the letters they stand
  for, ligatures are split, "…" becomes "...");
- stripped of format characters (Unicode category Cf: zero-width spaces and joiners, soft
  hyphens, byte-order marks, direction marks), which no reader sees;
- in a word that mixes Latin letters with Cyrillic or Greek ones, each of those that looks
  like a Latin letter is read as that letter (a word wholly in another script is left
  alone: it is that language, not a disguise);
- a run of three or more single letters separated by single spaces ("k i l l") is read as
  one word;
- digits drawn like letters (0 o, 1 i or l, 3 e, 4 a, 5 s, 7 t) in a word that mixes them with
  letters are read as those letters, when the word then is one the model knows and was not
  one as written ("w4nt t0 d13", "k1ll mys3lf"). Product and unit names keep their digits:
  a number with a unit or an ordinal ending ("4k", "5g", "$10k", "2nd") is never read, and
  a word of fewer than four characters ("i7", "a4", "t0") only in a text with a longer such
  word and at least three in all, where it is plainly the same disguise.

ASCII text only goes through the last two steps: ~1.5 us for a 40-word post, ~35 us for
10,000 characters, against ~9 and ~45 ms for the model's forward pass.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from importlib import resources

# Cyrillic and Greek letters drawn like a Latin letter in common fonts (the pairs Unicode's
# confusables data lists, and Cyrillic ka for "k", which that data maps to Latin kra).
_LOOKALIKES = str.maketrans(
    # Cyrillic: a e o p c y x i j s d q w h l k, A B E K M H O P C T Y X I J S Q W H I
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u0501\u051b\u051d\u04bb\u04cf\u043a\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0423\u0425\u0406\u0408\u0405\u051a\u051c\u04ba\u04c0"
    # Greek: a o p i k u x v, A B E Z H I K M N O P T Y X
    "\u03b1\u03bf\u03c1\u03b9\u03ba\u03c5\u03c7\u03bd\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7",
    "aeopcyxijsdqwhlkABEKMHOPCTYXIJSQWHIaopikuxvABEZHIKMNOPTYX",
)
_WORD = re.compile(r"\w+")
_LATIN = re.compile(r"[A-Za-z]")
_SPACED = re.compile(r"\b(?:[^\W\d_] ){2,}[^\W\d_]\b")
# What any such run starts with, after a space: found fast (the search skips to spaces),
# so the run's pattern is only tried on the texts that have one.
_SPACED_HINT = re.compile(r" [^\W\d_] [^\W\d_] ")
# A letter beside a digit drawn like one: found fast, so only texts that have one are read
# word by word.
_DIGIT_HINT = re.compile(r"[A-Za-z][013457]|[013457][A-Za-z]")
# A run of letters and digits (found in linear time; each is then tested as a word).
_ALNUM = re.compile(r"[A-Za-z0-9]+")
_LETTER = re.compile(r"[A-Za-z]")
_LEET_DIGIT = re.compile(r"[013457]")
_OTHER_DIGIT = re.compile(r"[2689]")
# A number with a unit or an ordinal ending keeps its digits: 4k, 5g, 10am, 3d, 2nd, 64gb.
_NUMBER_WITH_UNIT = re.compile(
    r"[0-9]+(?:k|m|b|g|p|x|d|s|v|w|am|pm|hz|mm|cm|km|kg|lb|lbs|oz|ml|gb|mb|tb|kb|mp|fps|"
    r"yo|yr|yrs)|[0-9]*(?:1[123]th|1st|2nd|3rd|[04-9]th)"
)
_DIGITS_AS_I = str.maketrans("013457", "oieast")
_DIGITS_AS_L = str.maketrans("013457", "oleast")
# No word of the vocabulary is longer: a longer run is not a disguised word.
_LONGEST_WORD = 30
# A disguised word this long or longer is read on its own; shorter ones ("t0", "d13", the
# shape of "i7" or "a4") only beside one such and at least two other disguised words.
_LONG_WORD = 4
_SHORT_WORDS_READ_FROM = 3


def as_read(text: str) -> str:
    """``text`` as a reader reads it (see the module's rules)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
        text = "".join(c for c in text if unicodedata.category(c) != "Cf")
        text = _WORD.sub(_unmask_word, text)
    if _SPACED_HINT.search(" " + text):
        text = _SPACED.sub(_join, text)
    if _DIGIT_HINT.search(text):
        text = _read_digits(text)
    return text


def _unmask_word(m: re.Match[str]) -> str:
    word = m.group(0)
    if word.isascii() or not _LATIN.search(word):
        return word
    return word.translate(_LOOKALIKES)


def _join(m: re.Match[str]) -> str:
    return m.group(0).replace(" ", "")


@functools.cache
def known_words() -> frozenset[str]:
    """The whole words of the model's vocabulary (its tokenizer's, without word pieces): what
    a word with digits in it must read as to be read at all. Loaded once (~12 ms)."""
    source = resources.files("matcher.data").joinpath("minilm_tokenizer.json")
    vocab = json.loads(source.read_text(encoding="utf-8"))["model"]["vocab"]
    return frozenset(w for w in vocab if w.isalpha() and w.islower())


def _read_digits(text: str) -> str:
    known = known_words()
    found: list[tuple[int, int, str]] = []
    long_words = 0
    for m in _ALNUM.finditer(text):
        word = m.group(0).lower()
        if (
            len(word) > _LONGEST_WORD
            or _OTHER_DIGIT.search(word)
            or not _LEET_DIGIT.search(word)
            or not _LETTER.search(word)
            or word in known
            or _NUMBER_WITH_UNIT.fullmatch(word)
        ):
            continue
        for table in (_DIGITS_AS_I, _DIGITS_AS_L):
            letters = word.translate(table)
            if letters in known:
                found.append((m.start(), m.end(), letters))
                long_words += len(word) >= _LONG_WORD
                break
    if not long_words:
        return text
    short_too = len(found) >= _SHORT_WORDS_READ_FROM
    parts, last = [], 0
    for start, end, letters in found:
        if end - start >= _LONG_WORD or short_too:
            parts += [text[last:start], letters]
            last = end
    parts.append(text[last:])
    return "".join(parts)
