"""Shortens the tag's own variable names after rjsmin (which only strips space and comments).

A deliberately small renamer for the tag's restricted dialect, not a general JavaScript
minifier. Every name the bundle *declares* (``const``/``let``/``var``, ``function`` names and
parameters, arrow parameters, ``catch`` bindings, destructuring) is renamed consistently
everywhere it appears as a variable, so scoping is preserved without a scope analysis.
Property names (after ``.``/``?.``), object keys and strings are left alone; shorthand
properties (``{slot, id}``) are expanded (``{slot:a,id:b}``). Names that the bundle does
not declare (browser globals) are never touched, and never reused as short names.

Unsupported constructs (template literals, default values in patterns) raise ManglerError,
so the builder fails loudly instead of emitting a broken tag.
"""

from __future__ import annotations

import itertools
import re
import string
from collections import Counter
from collections.abc import Iterator

KEYWORDS = frozenset(
    [
        "break",
        "case",
        "catch",
        "class",
        "const",
        "continue",
        "debugger",
        "default",
        "delete",
        "do",
        "else",
        "export",
        "extends",
        "false",
        "finally",
        "for",
        "function",
        "if",
        "import",
        "in",
        "instanceof",
        "let",
        "new",
        "null",
        "of",
        "return",
        "super",
        "switch",
        "this",
        "throw",
        "true",
        "try",
        "typeof",
        "undefined",
        "var",
        "void",
        "while",
        "with",
        "yield",
        "async",
        "await",
        "arguments",
        "static",
        "get",
        "set",
        "NaN",
        "Infinity",
        "eval",
    ]
)
# Globals a tag may use bare; declaring a variable with one of these names is refused.
BROWSER_GLOBALS = frozenset(
    [
        "window",
        "document",
        "location",
        "navigator",
        "fetch",
        "performance",
        "crypto",
        "setTimeout",
        "clearTimeout",
        "Image",
        "Map",
        "Set",
        "WeakSet",
        "WeakMap",
        "Math",
        "JSON",
        "String",
        "Number",
        "Array",
        "Object",
        "Error",
        "URL",
        "Promise",
        "EventTarget",
        "CustomEvent",
        "Event",
        "IntersectionObserver",
        "MutationObserver",
        "Uint8Array",
        "NodeFilter",
        "console",
        "self",
        "globalThis",
    ]
)
# After these a "/" starts a regular expression, not a division.
_REGEX_AFTER_WORDS = frozenset(
    ["return", "typeof", "case", "do", "else", "in", "of", "new", "delete", "void", "throw"]
)
_PUNCT = sorted(
    [
        "...",
        "?.",
        "=>",
        "===",
        "!==",
        "==",
        "!=",
        "<=",
        ">=",
        "&&",
        "||",
        "??",
        "&&=",
        "||=",
        "??=",
        "+=",
        "-=",
        "*=",
        "/=",
        "%=",
        "++",
        "--",
        ">>>",
        ">>",
        "<<",
        "**",
        "{",
        "}",
        "(",
        ")",
        "[",
        "]",
        ";",
        ",",
        "<",
        ">",
        "+",
        "-",
        "*",
        "/",
        "%",
        "&",
        "|",
        "^",
        "!",
        "~",
        "?",
        ":",
        "=",
        ".",
    ],
    key=len,
    reverse=True,
)
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_NUMBER = re.compile(r"\d[\w.]*|\.\d[\w]*")
_SPACE = re.compile(r"\s+")


class ManglerError(ValueError):
    """The source uses a construct this renamer does not handle."""


Token = tuple[str, str]  # (kind, text); kinds: ws str regex id num punct


def _string_end(src: str, i: int) -> int:
    quote, j = src[i], i + 1
    while j < len(src) and src[j] != quote:
        if src[j] == "\n":
            raise ManglerError(f"unterminated string at {i}")
        j += 2 if src[j] == "\\" else 1
    return j + 1


def _regex_end(src: str, i: int) -> int:
    j, in_class = i + 1, False
    while j < len(src):
        c = src[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif c == "/" and not in_class:
            j += 1
            while j < len(src) and src[j].isalpha():
                j += 1
            return j
        elif c == "\n":
            break
        j += 1
    raise ManglerError(f"unterminated regular expression at {i}")


def tokenize(src: str) -> list[Token]:
    tokens: list[Token] = []
    prev: Token | None = None  # the last significant token
    i = 0
    while i < len(src):
        c = src[i]
        if m := _SPACE.match(src, i):
            tokens.append(("ws", m.group()))
            i = m.end()
            continue
        if c == "`":
            raise ManglerError(f"template literal at {i}: use string concatenation in the tag")
        if c in "\"'":
            end, kind = _string_end(src, i), "str"
        elif c == "/" and (
            prev is None
            or (prev[0] == "punct" and prev[1] not in (")", "]", "}"))
            or (prev[0] == "id" and prev[1] in _REGEX_AFTER_WORDS)
        ):
            end, kind = _regex_end(src, i), "regex"
        elif m := _IDENT.match(src, i):
            end, kind = m.end(), "id"
        elif (m := _NUMBER.match(src, i)) and not src.startswith("...", i):
            end, kind = m.end(), "num"
        else:
            op = next((p for p in _PUNCT if src.startswith(p, i)), None)
            if op is None:
                raise ManglerError(f"unexpected character {c!r} at {i}")
            if op == "?." and src[i + 2 : i + 3].isdigit():
                op = "?"  # a ternary before a number: a?.5:1
            end, kind = i + len(op), "punct"
        prev = (kind, src[i:end])
        tokens.append(prev)
        i = end
    return tokens


def _closing(sig: list[Token], k: int) -> int:
    """Index of the bracket closing the one at ``k``."""
    opener = sig[k][1]
    closer = {"(": ")", "[": "]", "{": "}"}[opener]
    depth = 0
    for j in range(k, len(sig)):
        if sig[j] == ("punct", opener):
            depth += 1
        elif sig[j] == ("punct", closer):
            depth -= 1
            if depth == 0:
                return j
    raise ManglerError(f"unbalanced {opener}")


def _opening(sig: list[Token], k: int) -> int:
    closer = sig[k][1]
    opener = {")": "(", "]": "[", "}": "{"}[closer]
    depth = 0
    for j in range(k, -1, -1):
        if sig[j] == ("punct", closer):
            depth += 1
        elif sig[j] == ("punct", opener):
            depth -= 1
            if depth == 0:
                return j
    raise ManglerError(f"unbalanced {closer}")


def _bindings(sig: list[Token], lo: int, hi: int) -> set[str]:
    """Names bound by a parameter list or destructuring pattern between ``lo`` and ``hi``."""
    names = set()
    for j in range(lo + 1, hi):
        kind, text = sig[j]
        if kind != "id" or text in KEYWORDS or sig[j - 1][1] in (".", "?."):
            continue
        after = sig[j + 1][1]
        if after == "=":
            raise ManglerError(f"default value for {text!r} is not supported")
        if after != ":":  # `{key: name}` binds name, not key
            names.add(text)
    return names


def declared_names(sig: list[Token]) -> set[str]:
    names: set[str] = set()
    for k, (kind, text) in enumerate(sig):
        nxt = sig[k + 1] if k + 1 < len(sig) else ("", "")
        if kind == "id" and text in ("const", "let", "var"):
            if nxt[0] == "id":
                names.add(nxt[1])
            elif nxt[1] in ("{", "["):
                names |= _bindings(sig, k + 1, _closing(sig, k + 1))
        elif kind == "id" and text == "function":
            j = k + 1
            if sig[j][0] == "id":
                names.add(sig[j][1])
                j += 1
            names |= _bindings(sig, j, _closing(sig, j))
        elif kind == "id" and text == "catch" and nxt[1] == "(":
            names |= _bindings(sig, k + 1, _closing(sig, k + 1))
        elif (kind, text) == ("punct", "=>"):
            before = sig[k - 1]
            if before[0] == "id":
                names.add(before[1])
            elif before[1] == ")":
                names |= _bindings(sig, _opening(sig, k - 1), k - 1)
    shadowed = names & BROWSER_GLOBALS
    if shadowed:
        # Renaming is global: a local named like a global would rename the global's uses too.
        raise ManglerError(f"declared names shadow browser globals: {sorted(shadowed)}")
    return names - KEYWORDS


def _short_names(taken: set[str]) -> Iterator[str]:
    letters = string.ascii_letters
    for size in itertools.count(1):
        for combo in itertools.product(letters, repeat=size):
            name = "".join(combo)
            if name not in taken and name not in KEYWORDS:
                yield name


_OBJECT_AFTER = frozenset(
    [
        "(",
        ",",
        "=",
        ":",
        "[",
        "?",
        "...",
        "&&",
        "||",
        "??",
        "!",
        "return",
        "throw",
        "const",
        "let",
        "var",
    ]
)


def mangle(src: str) -> str:
    tokens = tokenize(src)
    sig_index = [i for i, t in enumerate(tokens) if t[0] != "ws"]
    sig = [tokens[i] for i in sig_index]
    names = declared_names(sig)
    counts = Counter(text for kind, text in sig if kind == "id" and text in names)
    taken = {text for kind, text in sig if kind == "id" and text not in names}
    by_use = sorted(names, key=lambda n: (-counts[n], n))  # the most used get one letter
    short = dict(zip(by_use, _short_names(taken), strict=False))

    out = [text for _kind, text in tokens]
    # For each open bracket: True when it is a "{" of an object literal or pattern.
    brackets: list[bool] = []
    for k, (kind, text) in enumerate(sig):
        prev = sig[k - 1][1] if k else ""
        if kind == "punct" and text in ("{", "(", "["):
            brackets.append(text == "{" and prev in _OBJECT_AFTER)
        elif kind == "punct" and text in ("}", ")", "]"):
            brackets.pop()
        if kind != "id" or text not in short or prev in (".", "?."):
            continue
        nxt = sig[k + 1][1] if k + 1 < len(sig) else ""
        renamed = short[text]
        if brackets and brackets[-1] and prev in ("{", ","):
            if nxt in (":", "("):
                continue  # an object key or method name
            if nxt in (",", "}"):
                renamed = f"{text}:{renamed}"  # shorthand property
            elif nxt == "=":
                raise ManglerError(f"default value for {text!r} is not supported")
        out[sig_index[k]] = renamed
    _merge_consts(sig, sig_index, out)
    _tidy(sig, sig_index, out)
    return "".join(out)


def _merge_consts(sig: list[Token], sig_index: list[int], out: list[str]) -> None:
    """``const a=1;const b=2`` becomes ``const a=1,b=2`` (one declaration, same block), and
    the same for ``let``."""
    depth = 0
    in_decl: dict[int, str] = {}  # block depth -> the keyword of the declaration there
    for k, (kind, text) in enumerate(sig):
        prev = sig[k - 1][1] if k else ";"
        if kind == "punct" and text in ("{", "(", "["):
            depth += 1
        elif kind == "punct" and text in ("}", ")", "]"):
            in_decl.pop(depth, None)
            depth -= 1
        elif kind == "id" and text in ("const", "let") and prev in (";", "{", "}"):
            in_decl[depth] = text
        elif (kind, text) == ("punct", ";") and depth in in_decl:
            if k + 1 < len(sig) and sig[k + 1] == ("id", in_decl[depth]):
                out[sig_index[k]] = ","
                out[sig_index[k + 1]] = ""
                # skip the space rjsmin leaves after the keyword
                nxt = sig_index[k + 1] + 1
                if nxt < len(out) and out[nxt] == " ":
                    out[nxt] = ""
            else:
                del in_decl[depth]


_HEADERS = frozenset(["if", "for", "while", "with"])


def _tidy(sig: list[Token], sig_index: list[int], out: list[str]) -> None:
    """What rjsmin leaves and a minifier drops: ``(a)=>`` becomes ``a=>``, ``true`` and
    ``false`` become ``!0`` and ``!1``, and a ``;`` right before ``}`` goes (except the empty
    statement of an ``if (...);``, ``for``, ``while``)."""
    for k, (kind, text) in enumerate(sig):
        prev = sig[k - 1][1] if k else ""
        if (
            text == "("
            and k + 3 < len(sig)
            and sig[k + 1][0] == "id"
            and sig[k + 1][1] not in KEYWORDS
            and sig[k + 2][1] == ")"
            and sig[k + 3][1] == "=>"
        ):
            out[sig_index[k]] = out[sig_index[k + 2]] = ""
        elif kind == "id" and text in ("true", "false") and prev not in (".", "?."):
            out[sig_index[k]] = "!0" if text == "true" else "!1"
        elif (
            (kind, text) == ("punct", ";")
            and out[sig_index[k]] == ";"
            and k + 1 < len(sig)
            and sig[k + 1][1] == "}"
            and not (prev == ")" and sig[_opening(sig, k - 1) - 1][1] in _HEADERS)
            and prev not in ("else", "do", ";", "{")
        ):
            out[sig_index[k]] = ""
