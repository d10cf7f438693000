"""The registry of knobs a remedy may name (``knobs.toml`` beside the rules), and finding the
knobs a text names.

A remedy is what a user acts on with a dead job: a knob written from memory (a variable that does
not exist, a flag of another tool, a default that changed) sends them the wrong way. So every
environment variable, long command-line flag, function, keyword argument and config key that a
remedy names must be in the registry, with the library, the versions where it holds, its default
and where that was verified. ``monitor rules test`` fails on a remedy naming one it does not hold
(docs/rules-format.md, "The knob registry").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import regex

from monitor.diagnosis.textfile import read_toml_file

KNOBS_FILE = "knobs.toml"
KINDS = ("env", "flag", "function", "argument", "config", "command", "module", "value")
KNOB_KEYS = {"name", "kind", "library", "verified", "holds", "default", "torch_file", "contains", "monitor_command"}
REQUIRED_KEYS = ("name", "kind", "library", "verified")


class KnobError(Exception):
    """A registry file that cannot be used; ``str()`` is one line: ``file:line: message``."""


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    kind: str
    library: str
    # Where it was checked: a source file and line of the library (with its version), or a doc page.
    verified: str
    # The versions where it holds as the remedies use it ("" = every version in use).
    holds: str = ""
    default: str = ""
    # A file of the installed torch package that must contain ``contains`` (default: the name):
    # the tests confirm the knob against the torch they run with.
    torch_file: str = ""
    contains: str = ""
    # One of monitor's own flags: the sub-command whose parser must accept it.
    monitor_command: str = ""
    source: str = ""
    line: int = 0


# What a knob looks like in prose. Found in this order; a later kind never re-reads text an
# earlier one took (``torch.cuda.set_device`` is one dotted name, not also ``set_device``).
_TEMPLATE_FIELD = regex.compile(r"\{[^{}\n]*\}")
_DOTTED = regex.compile(r"(?<![\w./-])(?:torch|dist|wandb|jax|os|deepspeed|accelerate|transformers)(?:\.\w+)+")
_KEYWORD = regex.compile(r"(?<![\w.-])([a-z_][a-z0-9_]{2,})=(?![=\s])")
# NAME_WITH_UNDERSCORES, or any CAPITALS set with "=" (PYTHONFAULTHANDLER=1).
_ENV = regex.compile(r"(?<![\w./-])(?:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|[A-Z][A-Z0-9]{3,}(?==))")
_FLAG = regex.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
_IDENTIFIER = regex.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+_?(?![\w-])")
_CALLEE = regex.compile(r"([A-Za-z_][\w.]*)\($")
_WORD = regex.compile(r"[A-Za-z_]\w*")
_SHORT_CALL = regex.compile(r"[A-Za-z_]\w*\([a-z_]\w*=\)")


def mentions(text: str) -> list[str]:
    """The knobs ``text`` names, in order, each once. Keyword arguments are written
    ``callee(name=)`` inside a call (``init_process_group(timeout=)``), else ``name=``."""
    text = _TEMPLATE_FIELD.sub(" ", text)
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, str]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= a or start >= b for a, b in taken)

    for match in _DOTTED.finditer(text):
        taken.append(match.span())
        found.append((match.start(), match.group()))
    for match in _KEYWORD.finditer(text):
        if not free(*match.span(1)):
            continue
        taken.append(match.span(1))
        callee = _enclosing_call(text, match.start())
        found.append((match.start(), f"{callee}({match.group(1)}=)" if callee else f"{match.group(1)}="))
    for pattern in (_ENV, _FLAG, _IDENTIFIER):
        for match in pattern.finditer(text):
            if free(*match.span()):
                taken.append(match.span())
                found.append((match.start(), match.group()))
    names: list[str] = []
    for _, name in sorted(found):
        if name not in names:
            names.append(name)
    return names


def _enclosing_call(text: str, position: int) -> str:
    """The name of the call whose parentheses hold ``position`` ("" outside any call)."""
    depth = 0
    for index in range(position - 1, -1, -1):
        char = text[index]
        if char == ")":
            depth += 1
        elif char == "(":
            if depth == 0:
                callee = _CALLEE.search(text, 0, index + 1)
                return callee.group(1) if callee else ""
            depth -= 1
        elif char == "\n":
            break
    return ""


def unknown(text: str, registry: dict[str, Knob]) -> list[str]:
    """The knobs ``text`` names that ``registry`` does not hold."""
    return [name for name in mentions(text) if lookup(name, registry) is None]


def lookup(name: str, registry: dict[str, Knob]) -> Knob | None:
    """The registry's entry for a mention. Prose shortens names, so a mention also stands for the
    one entry it shortens: ``weights_only`` or ``weights_only=`` for ``torch.load(weights_only=)``,
    ``clip_grad_norm_`` for ``torch.nn.utils.clip_grad_norm_``, ``set_device(x=)`` for
    ``torch.cuda.set_device(x=)``. A shortening that fits several entries is no knob."""
    if name in registry:
        return registry[name]
    bare = name.rstrip("=")
    suffixes: tuple[str, ...]
    if _WORD.fullmatch(bare):
        suffixes = (f"({bare}=)", f".{bare}")
    elif _SHORT_CALL.fullmatch(name):
        suffixes = (f".{name}",)
    else:
        return None
    fits = [knob for key, knob in registry.items() if key.endswith(suffixes)]
    return fits[0] if len(fits) == 1 else None


def load_registry(directories) -> dict[str, Knob]:
    """Every knob of the ``knobs.toml`` files in ``directories`` (later files add to and
    replace earlier entries of the same name)."""
    registry: dict[str, Knob] = {}
    for directory in directories:
        path = Path(directory) / KNOBS_FILE
        if path.is_file():
            for knob in load_file(path):
                registry[knob.name] = knob
    return registry


_KNOB_TABLE = regex.compile(r"\s*\[\[\s*knob\s*\]\]")


def load_file(path: Path) -> list[Knob]:
    text, data = read_toml_file(path, "the knob registry", KnobError)
    lines = text.splitlines()
    starts = [n for n, line in enumerate(lines, start=1) if _KNOB_TABLE.match(line)]
    if set(data) - {"knob"}:
        raise KnobError(f"{path}:1: unknown top-level key {sorted(set(data) - {'knob'})[0]!r} (expected [[knob]] tables)")
    knobs: list[Knob] = []
    seen: dict[str, int] = {}
    for index, table in enumerate(data.get("knob", [])):
        line = starts[index] if index < len(starts) else 1
        name = table.get("name", f"#{index + 1}")
        where = f"{path}:{line}: knob {name}"
        extra = set(table) - KNOB_KEYS
        if extra:
            raise KnobError(f"{where}: unknown key {sorted(extra)[0]!r}")
        missing = [key for key in REQUIRED_KEYS if not isinstance(table.get(key), str) or not table[key].strip()]
        if missing:
            raise KnobError(f"{where}: missing {missing[0]!r}")
        if table["kind"] not in KINDS:
            raise KnobError(f"{where}: kind {table['kind']!r} is not one of {', '.join(KINDS)}")
        if name in seen:
            raise KnobError(f"{where}: duplicate name (first at line {seen[name]})")
        seen[name] = line
        knobs.append(Knob(**table, source=str(path), line=line))
    return knobs
