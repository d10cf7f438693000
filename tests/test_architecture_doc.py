"""docs/architecture.md is the map of monitor/: the files, classes, functions and methods it names
in backticks exist (a rename that forgets the map fails here)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {path: path.read_text() for path in (ROOT / "monitor").rglob("*.py")}
MODULES: dict[str, list[Path]] = {}
for _path in SOURCES:
    MODULES.setdefault(_path.stem, []).append(_path)
# Names of files a run writes (run-X.log, .job.json): the map describes them, they are not sources.
WRITTEN = re.compile(r"(?:^|/)(?:run-|\.)|X\.|\.\.\.|^(?:job|node)\.json$")


def _defined(name: str, files: list[Path]) -> bool:
    name = re.escape(name)
    pattern = re.compile(rf"^\s*(?:async def|def|class)\s+{name}\b|^\s*(?:self\.)?{name}\s*(?::[^=\n]+)?=|^\s+{name}\s*:", re.M)
    return any(pattern.search(SOURCES[f]) for f in files)


def _problems(doc: Path) -> list[str]:
    text = doc.read_text()
    problems = []
    for token in sorted(set(re.findall(r"`([^`\s]+)`", text))):
        token = token.split("(")[0]
        if re.fullmatch(r"[\w./-]+\.(?:py|toml|tcss)", token):
            if WRITTEN.search(token):
                continue
            if not any((base / token).exists() for base in (ROOT, ROOT / "monitor", ROOT / "rules")) \
                    and not any(p.name == token for p in SOURCES) and not (ROOT / "rules" / token).exists():
                problems.append(f"no file {token}")
            continue
        match = re.fullmatch(r"([A-Za-z_]\w*)\.([A-Za-z_]\w*)", token)
        if match is None or match[2] in ("json", "jsonl", "log", "out", "txt", "md", "sock", "gz"):
            continue  # a file's name, not a module's member
        left, right = match.groups()
        if left[0].isupper():
            files = [p for p, source in SOURCES.items() if re.search(rf"^class {left}\b", source, re.M)]
            if files and not _defined(right, files):
                problems.append(f"{token}: class {left} has no {right}")
        elif left in MODULES and not any((p.parent / left / f"{right}.py").exists() or
                                         (p.parent.name == left and (p.parent / f"{right}.py").exists())
                                         for p in SOURCES) and not _defined(right, MODULES[left]):
            problems.append(f"{token}: module {left} defines no {right}")
    return problems


def test_what_the_architecture_map_names_exists() -> None:
    assert _problems(ROOT / "docs" / "architecture.md") == []


def test_the_check_catches_a_stale_name(tmp_path) -> None:
    """The check is no tautology: a renamed function, a method or a file that went are reported."""
    doc = tmp_path / "architecture.md"
    doc.write_text("the launcher's report (`root_cause.mark_requested_stop`), `Follower.no_such_method`, `nothere.py`\n")
    assert sorted(_problems(doc)) == sorted([
        "no file nothere.py", "Follower.no_such_method: class Follower has no no_such_method",
        "root_cause.mark_requested_stop: module root_cause defines no mark_requested_stop"])
