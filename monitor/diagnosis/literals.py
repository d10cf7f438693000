"""Deriving the literal text a regex needs, so a cheap multi-string search can skip most lines.

``required_sets(pattern)`` returns sets of strings such that every match of ``pattern``
contains, for each set, at least one of its strings (``loss ... nan`` gives ``[{"loss"},
{"nan"}]``). ``required_literals(pattern)`` is the most selective single set, or None. It understands the common
subset of regex syntax used in rules: literal runs, escapes, classes, quantifiers, groups and
alternation. Anything it does not understand ends a literal run, which is always safe: a
shorter literal only lets more lines through to the real regex.
"""

from __future__ import annotations

# Escapes that stand for one literal character.
_LITERAL_ESCAPES = set(".^$*+?{}[]()|\\/-:#'\"<>=!,;@%&~` ")
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n"}
MIN_LITERAL = 3


class _Unsupported(Exception):
    pass


def required_sets(pattern: str) -> list[set[str]]:
    """Sets of literals (each at least MIN_LITERAL long) of which every match holds one each."""
    if pattern.startswith("(?") and "x" in _leading_flags(pattern):
        return []  # verbose mode: whitespace and comments are not literal
    try:
        items, _ = _alternation(pattern, 0, top=True)
    except _Unsupported:
        return []
    return [item for item in items if min(map(len, item)) >= MIN_LITERAL]


def required_literals(pattern: str) -> set[str] | None:
    """One literal per alternative such that every match contains one of them, or None."""
    best = None
    for item in required_sets(pattern):
        best = _better(best, item)
    return best


def _leading_flags(pattern: str) -> str:
    end = pattern.find(")")
    body = pattern[2:end] if end > 0 else ""
    return body if body.isalpha() else ""


def _better(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    """The more selective of two candidate sets (longest shortest literal, then fewest)."""
    if a is None:
        return b
    if b is None:
        return a
    key_a = (min(map(len, a)), -len(a))
    key_b = (min(map(len, b)), -len(b))
    return b if key_b > key_a else a


def _best(items: list[set[str]]) -> set[str] | None:
    best = None
    for item in items:
        best = _better(best, item)
    return best


def _alternation(p: str, i: int, top: bool = False) -> tuple[list[set[str]], int]:
    """Parses branches until ')' (or the end at top level); returns (required sets, index)."""
    branches: list[list[set[str]]] = []
    while True:
        items, i = _sequence(p, i)
        branches.append(items)
        if i < len(p) and p[i] == "|":
            i += 1
            continue
        break
    if not top:
        if i >= len(p) or p[i] != ")":
            raise _Unsupported("unbalanced group")
    elif i != len(p):
        raise _Unsupported("unbalanced group")
    if len(branches) == 1:
        return branches[0], i
    # Several alternatives: only "one of each branch's best literal" is required.
    bests = [_best(b) for b in branches]
    if any(b is None for b in bests):
        return [], i
    return [set().union(*(b for b in bests if b is not None))], i


def _quantifier(p: str, i: int) -> tuple[int, int]:
    """(minimum repetitions, index after the quantifier) of a quantifier at i, or (1, i)."""
    if i >= len(p):
        return 1, i
    c = p[i]
    if c in "*?":
        low, i = 0, i + 1
    elif c == "+":
        low, i = 1, i + 1
    elif c == "{":
        end = p.find("}", i)
        body = p[i + 1 : end] if end > 0 else ""
        parts = body.split(",")
        if end < 0 or not parts[0].strip().isdigit():
            return 1, i  # a literal '{'
        low, i = int(parts[0]), end + 1
    else:
        return 1, i
    if i < len(p) and p[i] in "?+":
        i += 1  # lazy or possessive
    return low, i


def _sequence(p: str, i: int) -> tuple[list[set[str]], int]:
    items: list[set[str]] = []
    run = ""

    def end_run() -> None:
        nonlocal run
        if run:
            items.append({run})
        run = ""

    while i < len(p) and p[i] not in "|)":
        c = p[i]
        if c == "\\":
            if i + 1 >= len(p):
                raise _Unsupported("trailing backslash")
            e = p[i + 1]
            if e in _LITERAL_ESCAPES:
                char, i = e, i + 2
            elif e in _SIMPLE_ESCAPES:
                char, i = _SIMPLE_ESCAPES[e], i + 2
            else:
                # \d \w \s \b \x41 \N{..} \p{..} \1 ...: not a literal we can use.
                end_run()
                i = _skip_escape(p, i)
                _, i = _quantifier(p, i)
                continue
            low, j = _quantifier(p, i)
            if low == 0:
                end_run()
            else:
                run += char
                if j != i:
                    end_run()
            i = j
        elif c == "[":
            end_run()
            i = _skip_class(p, i)
            _, i = _quantifier(p, i)
        elif c == "(":
            end_run()
            inner, i = _group(p, i)
            low, i = _quantifier(p, i)
            if low > 0:
                items.extend(inner)
        elif c in ".^$":
            end_run()
            i += 1
            _, i = _quantifier(p, i)
        elif c in "*+?{":
            if c == "{" and _quantifier(p, i)[1] == i:
                run += c
                i += 1
                continue
            raise _Unsupported("quantifier without target")
        else:
            low, j = _quantifier(p, i + 1)
            if low == 0:
                end_run()
            else:
                run += c
                if j != i + 1:
                    end_run()
            i = j
    end_run()
    return items, i


def _skip_escape(p: str, i: int) -> int:
    """Index after the non-literal escape at p[i] == '\\' (with its argument, if any)."""
    e = p[i + 1]
    j = i + 2
    if e in "NpP" and p.startswith("{", j):
        return p.index("}", j) + 1
    width = {"x": 2, "u": 4, "U": 8}.get(e)
    if width:
        return j + width
    if e.isdigit():
        while j < len(p) and p[j].isdigit():
            j += 1
    return j


def _group(p: str, i: int) -> tuple[list[set[str]], int]:
    """Parses the group starting at p[i] == '('; returns (its required sets, index after)."""
    j = i + 1
    usable = True
    if p.startswith("?", j):
        if p.startswith("?P<", j):
            j = p.index(">", j) + 1
        elif p.startswith("?<", j) and not p.startswith(("?<=", "?<!"), j):
            j = p.index(">", j) + 1
        elif p.startswith("?P=", j):
            return [], p.index(")", j) + 1
        elif p.startswith(("?:", "?>"), j):
            j += 2
        elif p.startswith(("?=", "?!", "?<=", "?<!"), j):
            usable = False
            j += 3 if p.startswith("?<", j) else 2
        elif p.startswith("?#", j):
            return [], p.index(")", j) + 1
        else:
            # Inline flags: (?i) alone, or (?i:...) scoped.
            k = j + 1
            while k < len(p) and (p[k].isalpha() or p[k] == "-"):
                k += 1
            if k < len(p) and p[k] == ")":
                return [], k + 1
            if k < len(p) and p[k] == ":":
                j = k + 1
            else:
                raise _Unsupported("unknown group syntax")
    inner, j = _alternation(p, j)
    return (inner if usable else []), j + 1


def _skip_class(p: str, i: int) -> int:
    j = i + 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":
        j += 1
    while j < len(p):
        if p[j] == "\\":
            j += 2
            continue
        if p[j] == "[":
            j = _skip_class(p, j)  # nested set (regex module V1) or POSIX class
            continue
        if p[j] == "]":
            return j + 1
        j += 1
    raise _Unsupported("unterminated class")
