"""Text made safe for a terminal: log lines cleaned as they are read, and every other string
(file names, user rule titles, command lines) cleaned the same way before it is shown.

At the bottom of the package with ``monitor/model.py``: it imports nothing of ``monitor``.
"""

from __future__ import annotations

import regex

# CSI (colours, cursor moves), OSC (titles, hyperlinks; ended by BEL or ST), and other
# two-byte escapes. Colours are dropped here; the UI keeps them from the raw bytes if it wants.
_ESCAPES = regex.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"          # CSI ... final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL or ST (or cut off)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"    # DCS/SOS/PM/APC strings
    r"|\x1b[@-Z\\-_]"                    # other Fe escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"            # 8-bit CSI
)
# Control characters other than tab (NUL and DEL included), C1 controls, and the invisible
# format characters that can make a line read differently from what it holds: bidirectional
# overrides and isolates (a "Trojan Source" line), zero-width spaces and joiners, the BOM.
# U+2028/U+2029 (line and paragraph separators) break a line on some terminals.
_CONTROLS = regex.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")

# A file name's bytes that are not UTF-8 arrive as lone surrogates (os's surrogateescape), and
# printed they become those raw bytes again: 0x9b is CSI on a terminal with 8-bit controls.
_SURROGATES = regex.compile(r"[\ud800-\udfff]")


def _undecodable(match) -> str:
    """An undecodable byte shown as ``\\x9b`` (the name can still be found); any other lone
    surrogate as U+FFFD."""
    code = ord(match.group())
    return f"\\x{code - 0xdc00:02x}" if 0xdc80 <= code <= 0xdcff else "\ufffd"


def clean(raw: bytes | str) -> str:
    """One raw line (with or without its line end) as clean text."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    text = text.rstrip("\n")
    if "\r" in text:
        if text.find("\r") == len(text) - 1:
            text = text[:-1]  # a Windows line end
        else:
            # A progress bar redrawn with \r: keep only the last state that has any text.
            parts = [p for p in text.split("\r") if p.strip()]
            text = parts[-1] if parts else ""
    if text.isprintable():
        return text  # most lines: no escape codes, no control characters
    if "\x1b" in text or "\x9b" in text:
        text = _ESCAPES.sub("", text)
    return _CONTROLS.sub("", text)


def safe_text(text: str, keep_newlines: bool = False) -> str:
    """A string bound for a terminal that did not come from a log line (a file name, a user
    rule's title, a command line, a problem naming a path), cleaned as log text is: no escape
    codes, no control or invisible format characters, and no line breaks unless kept (a
    remedy's lines). A file named with ``ESC ] 0 ; ... BEL`` would otherwise retitle or clear
    the user's terminal."""
    text = str(text)
    if text.isprintable():
        return text
    if "\x1b" in text or "\x9b" in text:
        text = _ESCAPES.sub("", text)
    text = _SURROGATES.sub(_undecodable, text)
    if keep_newlines:
        return "\n".join(_CONTROLS.sub("", line) for line in text.split("\n"))
    return _CONTROLS.sub("", text.replace("\n", " "))


# What json.dumps(ensure_ascii=False) leaves raw that a terminal acts on: C1 controls (0x9b is
# CSI), the Unicode line separators, and lone surrogates (an undecodable byte of a file name).
# Escaped as \uXXXX, the JSON stays the same data.
_JSON_RAW = regex.compile(r"[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def safe_json(data, **options) -> str:
    """``json.dumps(data, ensure_ascii=False)`` with nothing in it a terminal would act on (json
    escapes the C0 controls, ESC included; this escapes the rest). The data is unchanged."""
    import json

    text = json.dumps(data, ensure_ascii=False, **options)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def say(text: str) -> None:
    """One line from the monitor on stderr (``monitor: ...``), cleaned, flushed at once: stdout
    stays the job's bytes (``run --headless``) or one finding per line (``watch --headless``)."""
    import sys

    print(f"monitor: {safe_text(text)}", file=sys.stderr, flush=True)


def is_clean(text: str) -> bool:
    """Whether ``text`` is one line as ``clean`` leaves it: no line break, no control, escape or
    invisible format character. For a consumer that must not trust its input to be cleaned."""
    return text.isprintable() or not (_CONTROLS.search(text) or "\n" in text)
