"""What changed between the last good run and a failed one, from the environments `monitor run`
records (``runner/environment.py``, kept in ``run-X.meta.json``): one short line per change, as an
engineer would write it in a bug report ("torch 2.5.1 -> 2.6.0", "NCCL_P2P_DISABLE=1 new")."""

from __future__ import annotations

MAX_CHANGES = 40


def changes(good: dict, bad: dict) -> list[str]:
    """The differences that matter, package versions first."""
    lines: list[str] = []
    if good.get("python") and bad.get("python") and good["python"] != bad["python"]:
        lines.append(f"python {good['python']} -> {bad['python']}")
    lines += _dict_changes(good.get("packages") or {}, bad.get("packages") or {}, " ")
    if good.get("torch_cuda") != bad.get("torch_cuda") and (good.get("torch_cuda") or bad.get("torch_cuda")):
        lines.append(f"torch's CUDA {good.get('torch_cuda') or 'none'} -> {bad.get('torch_cuda') or 'none'}")
    lines += _dict_changes(good.get("env") or {}, bad.get("env") or {}, "=")
    if good.get("driver") and bad.get("driver") and good["driver"] != bad["driver"]:
        lines.append(f"NVIDIA driver {good['driver']} -> {bad['driver']}")
    old_git, new_git = good.get("git") or {}, bad.get("git") or {}
    if old_git.get("commit") and new_git.get("commit") and old_git["commit"] != new_git["commit"]:
        lines.append(f"git commit {old_git['commit'][:12]} -> {new_git['commit'][:12]}")
    if new_git.get("dirty") and not old_git.get("dirty"):
        lines.append("the working folder has uncommitted changes (it had none)")
    if good.get("host") and bad.get("host") and good["host"] != bad["host"]:
        lines.append(f"host {good['host']} -> {bad['host']}")
    if good.get("command") and bad.get("command") and good["command"] != bad["command"]:
        lines.append(f"command: {' '.join(good['command'])} -> {' '.join(bad['command'])}")
    return lines[:MAX_CHANGES]


def _dict_changes(old: dict, new: dict, joiner: str) -> list[str]:
    lines = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if before is None:
            lines.append(f"{name}{joiner}{after} new")
        elif after is None:
            lines.append(f"{name}{joiner}{before} removed")
        elif joiner == "=":
            lines.append(f"{name}: {before} -> {after}")
        else:
            lines.append(f"{name} {before} -> {after}")
    return lines
