"""Filling ``{field}`` templates (titles, remedies, advice) from a finding's fields.

A template line that names a field the match did not capture is left out, so one remedy can
serve several wordings of a message. ``{{`` and ``}}`` are literal braces.
"""

from __future__ import annotations

import regex

_FIELD = regex.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)\}")


def field_names(template: str) -> set[str]:
    return {m.group(1) for m in _FIELD.finditer(template) if m.group(1)}


def render(template: str, fields: dict[str, str]) -> str:
    """The template with fields filled in; lines naming a missing field are dropped."""
    kept = []
    for line in template.strip("\n").split("\n"):
        missing = False

        def fill(match: regex.Match) -> str:
            nonlocal missing
            token = match.group(0)
            if token in ("{{", "}}"):
                return token[0]
            value = fields.get(match.group(1))
            if value is None or value == "":
                missing = True
                return ""
            return value

        text = _FIELD.sub(fill, line)
        if not missing:
            kept.append(text)
    return "\n".join(kept).strip()
