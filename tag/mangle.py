"""Shortens the tag's own variable names after rjsmin (which only strips space and comments).

A deliberately small renamer for the tag's restricted dialect, not a general JavaScript
minifier. Every name the bundle *declares* (``const``/``let``, ``function`` names and
parameters, arrow parameters, ``catch`` bindings, destructuring) is renamed where it appears
as a variable. Renaming follows the scopes (blocks, function and arrow bodies): each use goes
to the binding it resolves to, and bindings that never meet (the parameters of two
functions) share a short name, which the compressor rewards (an eighth off the tag's brotli
size). Property names (after ``.``/``?.``), object keys and strings are left alone; shorthand
properties (``{slot, id}``) are expanded (``{slot:a,id:b}``). Names that the bundle does
not declare (browser globals) are never touched, and never reused as short names.

Unsupported constructs (template literals, default values in patterns, ``var``, a declared
name used outside the scope that declares it) raise ManglerError, so the builder fails
loudly instead of emitting a broken tag.
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
    taken = {text for kind, text in sig if kind == "id" and text not in names}

    # Where a declared name is used as a variable (not a property or an object key), and
    # whether that use is a shorthand property ({slot} becomes {slot:a}).
    uses: dict[int, bool] = {}
    # For each open bracket: True when it is a "{" of an object literal or pattern.
    brackets: list[bool] = []
    for k, (kind, text) in enumerate(sig):
        prev = sig[k - 1][1] if k else ""
        if kind == "punct" and text in ("{", "(", "["):
            brackets.append(text == "{" and prev in _OBJECT_AFTER)
        elif kind == "punct" and text in ("}", ")", "]"):
            brackets.pop()
        if kind != "id" or text not in names or prev in (".", "?."):
            continue
        nxt = sig[k + 1][1] if k + 1 < len(sig) else ""
        shorthand = False
        if brackets and brackets[-1] and prev in ("{", ","):
            if nxt in (":", "("):
                continue  # an object key or method name
            if nxt in (",", "}"):
                shorthand = True
            elif nxt == "=":
                raise ManglerError(f"default value for {text!r} is not supported")
        uses[k] = shorthand

    short = _short_names_by_scope(sig, uses, taken)
    out = [text for _kind, text in tokens]
    for k, shorthand in uses.items():
        out[sig_index[k]] = f"{sig[k][1]}:{short[k]}" if shorthand else short[k]
    _merge_consts(sig, sig_index, out)
    _tidy(sig, sig_index, out)
    _drop_newlines(tokens, sig, out)
    return "".join(out)


class _Scope:
    """A block, a function or arrow body (with its parameters), or a concise arrow body:
    the tokens ``start`` to ``end`` of the significant token list."""

    __slots__ = ("bindings", "end", "parent", "start")

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.parent: _Scope | None = None
        self.bindings: dict[str, int] = {}  # name -> binding id


def _matching(sig: list[Token]) -> dict[int, int]:
    match, stack = {}, []
    for k, (kind, text) in enumerate(sig):
        if kind == "punct" and text in ("{", "(", "["):
            stack.append(k)
        elif kind == "punct" and text in ("}", ")", "]"):
            if not stack:
                raise ManglerError(f"unbalanced {text}")
            match[stack.pop()] = k
    if stack:
        raise ManglerError("unbalanced brackets")
    return match


def _concise_end(sig: list[Token], k: int) -> int:
    """The last token of the concise body of the arrow whose ``=>`` is at ``k``: an
    assignment expression, so it ends before a ``,``, ``;``, a closing bracket, or a ``:``
    that closes no ``?`` of its own."""
    depth = questions = 0
    for j in range(k + 1, len(sig)):
        kind, text = sig[j]
        if kind != "punct":
            continue
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            if depth == 0:
                return j - 1
            depth -= 1
        elif depth == 0 and text in (",", ";"):
            return j - 1
        elif depth == 0 and text == "?":
            questions += 1
        elif depth == 0 and text == ":":
            if questions == 0:
                return j - 1
            questions -= 1
    return len(sig) - 1


def _binding_positions(sig: list[Token], lo: int, hi: int) -> list[int]:
    """Positions of the names bound by a parameter list or pattern between ``lo`` and ``hi``
    (the same rule as ``_bindings``)."""
    return [
        j
        for j in range(lo + 1, hi)
        if sig[j][0] == "id"
        and sig[j][1] not in KEYWORDS
        and sig[j - 1][1] not in (".", "?.")
        and sig[j + 1][1] != ":"
    ]


def _short_names_by_scope(
    sig: list[Token], uses: dict[int, bool], taken: set[str]
) -> dict[int, str]:
    """The short name of each use in ``uses``. Names are given per binding, not per spelling:
    bindings that can never see each other (the parameters of two functions, the locals of
    two blocks) get the same short name, so the minified functions look alike and compress
    better. Two bindings conflict when one is declared in a scope that a use of the other
    passes through on its way out to its declaration (the first would shadow it), or when
    both are declared in the same scope."""
    match = _matching(sig)
    scopes = [_Scope(0, len(sig) - 1)]
    body: dict[int, _Scope] = {}  # position of a "{" or "=>" -> the scope it opens
    for k, (kind, text) in enumerate(sig):
        if (kind, text) == ("punct", "{"):
            body[k] = _Scope(k, match[k])
        elif (kind, text) == ("punct", "=>") and sig[k + 1] != ("punct", "{"):
            body[k] = _Scope(k, _concise_end(sig, k))
    scopes += sorted(body.values(), key=lambda s: (s.start, -s.end))

    # Nesting: each scope's parent is the innermost earlier scope that contains it.
    stack: list[_Scope] = []
    for scope in scopes:
        while stack and not (stack[-1].start <= scope.start and scope.end <= stack[-1].end):
            stack.pop()
        scope.parent = stack[-1] if stack else None
        stack.append(scope)

    def innermost(k: int) -> _Scope:
        found = scopes[0]
        for scope in scopes:  # sorted by start: the last one containing k is the innermost
            if scope.start > k:
                break
            if k <= scope.end:
                found = scope
        return found

    declared_at: dict[int, int] = {}  # position of a declaring name -> binding id
    binding_scope: list[_Scope] = []

    def declare(scope: _Scope, positions: list[int]) -> None:
        for j in positions:
            name = sig[j][1]
            if name not in scope.bindings:
                scope.bindings[name] = len(binding_scope)
                binding_scope.append(scope)
            declared_at[j] = scope.bindings[name]

    for k, (kind, text) in enumerate(sig):
        nxt = sig[k + 1] if k + 1 < len(sig) else ("", "")
        if kind == "id" and text == "var":
            raise ManglerError("var is not supported: use let or const")
        if kind == "id" and text in ("const", "let"):
            # A for-header's declaration is put in the enclosing block: a wider scope only
            # adds conflicts, so it is safe.
            if nxt[0] == "id":
                declare(innermost(k), [k + 1])
            elif nxt[1] in ("{", "["):
                declare(innermost(k), _binding_positions(sig, k + 1, match[k + 1]))
        elif kind == "id" and text == "function":
            j = k + 1
            if sig[j][0] == "id":
                declare(innermost(k), [j])
                j += 1
            if sig[match[j] + 1] != ("punct", "{"):
                raise ManglerError(f"function without a body at {k}")
            declare(body[match[j] + 1], _binding_positions(sig, j, match[j]))
        elif kind == "id" and text == "catch" and nxt[1] == "(":
            close = match[k + 1]
            declare(body[close + 1], _binding_positions(sig, k + 1, close))
        elif (kind, text) == ("punct", "=>"):
            scope = body[k + 1] if sig[k + 1] == ("punct", "{") else body[k]
            before = sig[k - 1]
            if before[0] == "id":
                declare(scope, [k - 1])
            elif before[1] == ")":
                declare(scope, _binding_positions(sig, _opening(sig, k - 1), k - 1))

    # Each use resolves to the innermost enclosing scope that binds its name.
    binding_of: dict[int, int] = {}
    chains: list[set[int]] = [set() for _ in binding_scope]  # binding -> bindings it passes
    uses_of: Counter[int] = Counter()
    for k in uses:
        if k in declared_at:
            binding = declared_at[k]
            binding_of[k] = binding
            uses_of[binding] += 1
            continue
        name = sig[k][1]
        walk: _Scope | None = innermost(k)
        passed: list[_Scope] = []
        while walk is not None and name not in walk.bindings:
            passed.append(walk)
            walk = walk.parent
        if walk is None:
            raise ManglerError(f"{name!r} at {k} is used outside the scope that declares it")
        binding = walk.bindings[name]
        binding_of[k] = binding
        uses_of[binding] += 1
        for scope in passed:
            chains[binding].update(scope.bindings.values())

    conflicts = [set(scope.bindings.values()) for scope in binding_scope]  # same scope
    for binding, passed_bindings in enumerate(chains):
        for other in passed_bindings:
            conflicts[binding].add(other)
            conflicts[other].add(binding)

    # The most used bindings get the shortest names; each takes the first name that no
    # binding it conflicts with has.
    candidates = list(itertools.islice(_short_names(taken), len(binding_scope)))
    assigned: dict[int, str] = {}
    order = sorted(range(len(binding_scope)), key=lambda b: (-uses_of[b], b))
    for binding in order:
        used = {assigned[o] for o in conflicts[binding] if o in assigned and o != binding}
        assigned[binding] = next(n for n in candidates if n not in used)
    return {k: assigned[binding] for k, binding in binding_of.items()}


def _merge_consts(sig: list[Token], sig_index: list[int], out: list[str]) -> None:
    """``const`` becomes ``let`` (the same binding for code that never assigns it again,
    which ESLint's no-const-assign and prefer-const hold the sources to, and two bytes
    shorter), and ``let a=1;let b=2`` becomes ``let a=1,b=2`` (one declaration, same
    block)."""
    for k, (kind, text) in enumerate(sig):
        if (kind, text) == ("id", "const") and (k == 0 or sig[k - 1][1] not in (".", "?.")):
            out[sig_index[k]] = "let"
    depth = 0
    in_decl: set[int] = set()  # block depths where a declaration runs on
    for k, (kind, text) in enumerate(sig):
        prev = sig[k - 1][1] if k else ";"
        if kind == "punct" and text in ("{", "(", "["):
            depth += 1
        elif kind == "punct" and text in ("}", ")", "]"):
            in_decl.discard(depth)
            depth -= 1
        elif kind == "id" and text in ("const", "let") and prev in (";", "{", "}"):
            in_decl.add(depth)
        elif (kind, text) == ("punct", ";") and depth in in_decl:
            if k + 1 < len(sig) and sig[k + 1] in (("id", "const"), ("id", "let")):
                out[sig_index[k]] = ","
                out[sig_index[k + 1]] = ""
                # skip the space rjsmin leaves after the keyword
                nxt = sig_index[k + 1] + 1
                if nxt < len(out) and out[nxt] == " ":
                    out[nxt] = ""
            else:
                in_decl.discard(depth)


_HEADERS = frozenset(["if", "for", "while", "with"])


_STATEMENT_BLOCK_AFTER = frozenset(["else", "try", "finally", "do", ";", "{", "}"])
_STATEMENT_START = frozenset([";", "{", "}"])


def _ends_a_statement(sig: list[Token], opened: dict[int, int], k: int) -> bool:
    """Whether the ``}`` at ``k`` closes a statement: a block (of an ``if``, ``for``,
    ``while``, ``catch``, ``try``, ``else``, ...) or the body of a function declaration,
    not an object literal, an arrow body or a function expression, which end expressions."""
    opening = opened[k]
    before = sig[opening - 1][1] if opening else ";"
    if before in _STATEMENT_BLOCK_AFTER:
        return True
    if before != ")":
        return False
    paren = opened[opening - 1]
    head = sig[paren - 1] if paren else ("", "")
    if head[1] in _HEADERS or head[1] == "catch":
        return True
    # function name(...) {...} at the start of a statement: a declaration.
    return (
        head[0] == "id"
        and paren >= 2
        and sig[paren - 2] == ("id", "function")
        and (paren == 2 or sig[paren - 3][1] in _STATEMENT_START)
    )


def _drop_newlines(tokens: list[Token], sig: list[Token], out: list[str]) -> None:
    """The line breaks rjsmin keeps after a ``}`` that ends a statement go: there a line
    break changes nothing (automatic semicolon insertion needs an expression to end, and
    ``++``, ``--`` and ``-->``, an HTML-like comment at the start of a line, keep theirs).
    After an expression's ``}`` (``x = () => {}`` with no ``;``), a line break stays."""
    opened = {end: start for start, end in _matching(sig).items()}  # closing -> opening
    k = -1  # index in sig of the last significant token
    for i, (kind, text) in enumerate(tokens):
        if kind != "ws":
            k += 1
        elif (
            text == "\n"
            and k >= 0
            and sig[k] == ("punct", "}")
            and i + 1 < len(tokens)
            and not tokens[i + 1][1].startswith(("+", "-"))
            and _ends_a_statement(sig, opened, k)
        ):
            out[i] = ""


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
