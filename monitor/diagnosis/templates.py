"""Filling ``{field}`` templates (titles, remedies, advice) from a finding's fields.

A template line that names a field the match did not capture is left out, so one remedy can
serve several wordings of a message, unless the field gives a fallback: ``{node|<node>}`` shows
``<node>`` while the log has not named the node, so a command stays in the remedy and is filled in
when the log holds the value. ``{{`` and ``}}`` are literal braces. ``{name:size}``
shows a byte count as a human size (``33762398024`` -> ``31.4 GiB``), ``{name:signal}`` an exit
code with the signal a negative one stands for (``-11`` -> ``-11 (SIGSEGV)``). When the rank is not
known, the phrases that name it are first rewritten without it (``without_rank``), so
"NCCL error on rank {rank}" reads "NCCL error" rather than naming rank "?".
"""

from __future__ import annotations

import signal

import regex

from monitor.units import binary_size

_FIELD = regex.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)(?::(size|signal))?(?:\|([^{}|\n]*))?\}")


def with_signal(code: str) -> str:
    """An exit code (as Python's subprocess gives it: -N for signal N) with its signal's name."""
    try:
        return f"{code} ({signal.Signals(-int(code)).name})" if code.startswith("-") else code
    except ValueError:
        return code


def human_size(count: str) -> str | None:
    """A byte count (digits) as a size in binary units with one decimal; None if not a count."""
    if not count.isdigit():
        return None
    value = int(count)
    return f"{value} bytes" if value < 1024 else binary_size(value)


# Rank phrases and their rank-less forms, tried in order (the first ones are the longer ones).
_RANK_PHRASES = [
    # The Chinese texts (``*_zh``) name a rank in these three ways.
    (regex.compile(r"（rank \{rank\}(?:，|）)"), lambda m: "（" if m.group(0).endswith("，") else ""),
    (regex.compile(r"第 \{rank\} 号 rank"), "某个 rank"),
    (regex.compile(r"\brank \{rank\} (?=[上的])"), "某个 rank "),
    (regex.compile(r" on rank \{rank\}'s GPU"), " on a GPU"),
    (regex.compile(r" \((?:on )?rank \{rank\}\)"), ""),
    (regex.compile(r" (?:on|from) rank \{rank\}"), ""),
    (regex.compile(r"\bRank \{rank\}"), "A rank"),
    (regex.compile(r"\b(rank|task) \{rank\}"), r"a \1"),
]


def without_rank(template: str) -> str:
    """``template`` with the phrases that name ``{rank}`` reworded for an unknown rank."""
    for pattern, replacement in _RANK_PHRASES:
        template = pattern.sub(replacement, template)
    return template


def field_names(template: str) -> set[str]:
    return {m.group(1) for m in _FIELD.finditer(template) if m.group(1)}


def render(template: str, fields: dict[str, str], missing: str | None = None) -> str:
    """The template with fields filled in; lines naming a missing field are dropped, or, with
    ``missing`` given (titles), show it in the field's place."""
    if not fields.get("rank"):
        template = without_rank(template)
    kept = []
    for line in template.strip("\n").split("\n"):
        dropped = False

        def fill(match: regex.Match) -> str:
            nonlocal dropped
            token = match.group(0)
            if token in ("{{", "}}"):
                return token[0]
            value = fields.get(match.group(1))
            if value and match.group(2) == "size":
                value = human_size(value) or value
            elif value and match.group(2) == "signal":
                value = with_signal(value)
            if value is None or value == "":
                if match.group(3) is not None:
                    return match.group(3)
                if missing is not None:
                    return missing
                dropped = True
                return ""
            return value

        text = _FIELD.sub(fill, line)
        if not dropped:
            kept.append(text)
    return "\n".join(kept).strip()
