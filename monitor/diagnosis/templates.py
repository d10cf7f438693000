"""Filling ``{field}`` templates (titles, remedies, advice) from a finding's fields.

A template line that names a field the match did not capture is left out, so one remedy can
serve several wordings of a message. ``{{`` and ``}}`` are literal braces.
"""

from __future__ import annotations

import regex

_FIELD = regex.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)\}")


def field_names(template: str) -> set[str]:
    return {m.group(1) for m in _FIELD.finditer(template) if m.group(1)}


def render(template: str, fields: dict[str, str], missing: str | None = None) -> str:
    """The template with fields filled in; lines naming a missing field are dropped, or, with
    ``missing`` given (titles), show it in the field's place."""
    kept = []
    for line in template.strip("\n").split("\n"):
        dropped = False

        def fill(match: regex.Match) -> str:
            nonlocal dropped
            token = match.group(0)
            if token in ("{{", "}}"):
                return token[0]
            value = fields.get(match.group(1))
            if value is None or value == "":
                if missing is not None:
                    return missing
                dropped = True
                return ""
            return value

        text = _FIELD.sub(fill, line)
        if not dropped:
            kept.append(text)
    return "\n".join(kept).strip()
