"""Words of findings no rule makes (the exit, preflight checks, metric signals, a stall, a node,
checkpoints, stacks, flight-recorder dumps): their titles and remedies, kept as data in
``advice.toml`` beside the shipped rules: one text per piece of advice, wherever it is shown,
checked like the rules' remedies (examples, knobs).

``advice(id, **fields)`` renders one (``templates.render``). An unknown id is a bug of ours, not
of the user's input: it raises ``KeyError``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from monitor.diagnosis.templates import field_names, render
from monitor.diagnosis.textfile import read_toml_file

ADVICE_FILE = "advice.toml"


class AdviceError(Exception):
    """The advice file cannot be used; ``str()`` is one line naming the file."""


@dataclass(frozen=True, slots=True)
class AdviceEntry:
    id: str
    text: str
    example_fields: dict[str, str] = field(default_factory=dict)
    example_contains: str = ""
    # The text in other languages (``text_zh``), the same fields.
    translations: dict[str, str] = field(default_factory=dict)


# The one language of everything the process says: a command sets it once from --lang or the locale
# (``use_language``) before it loads rules; the catalogue's texts (``load_catalogue``) and the advice
# of findings no rule makes both read it here, so the two cannot disagree.
_language = "en"


def use_language(lang: str) -> None:
    global _language
    _language = lang


def language() -> str:
    return _language


@contextlib.contextmanager
def speaking(lang: str) -> Iterator[None]:
    """The process's language is ``lang`` for the block, then what it was."""
    before = _language
    use_language(lang)
    try:
        yield
    finally:
        use_language(before)


def advice(advice_id: str, **fields: str) -> str:
    """The advice in the process's language. A text that starts with spaces keeps them: it is a
    clause put after a word (" (fan at 100%)"), where Chinese needs none."""
    entry = shipped()[advice_id]
    text = entry.translations.get(_language, entry.text)
    lead = text[: len(text) - len(text.lstrip(" "))]
    return lead + render(text, {name: str(value) for name, value in fields.items()})


@functools.cache
def shipped() -> dict[str, AdviceEntry]:
    from monitor.diagnosis.catalogue import shipped_rules_dir

    directory = shipped_rules_dir()
    return load_file(directory / ADVICE_FILE) if directory is not None else {}


def load_file(path: Path) -> dict[str, AdviceEntry]:
    _, data = read_toml_file(path, "the advice file", AdviceError)
    entries: dict[str, AdviceEntry] = {}
    for index, table in enumerate(data.get("advice", [])):
        if not isinstance(table.get("id"), str) or not isinstance(table.get("text"), str):
            raise AdviceError(f"{path}: advice #{index + 1}: needs an id and a text")
        example = table.get("example", {})
        translations = {}
        for key in [k for k in table if k.startswith("text_")]:
            if not isinstance(table[key], str) or field_names(table[key]) != field_names(table["text"]):
                raise AdviceError(f"{path}: advice {table['id']}: {key} must be a text naming the same fields as text")
            translations[key.removeprefix("text_")] = table[key]
        entries[table["id"]] = AdviceEntry(table["id"], table["text"], dict(example.get("fields", {})),
                                      example.get("contains", ""), translations)
    return entries
