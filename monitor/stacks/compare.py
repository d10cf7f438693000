"""What a capture says about a hang: group the ranks by where they are, and name the odd ones.

Where a rank is: the collective it waits in, if any (the outermost ``torch.distributed`` frame
named like a collective, or autograd's ``backward``, where DistributedDataParallel all-reduces
the gradients), and its innermost frame in the user's own code (not in a library or the
standard library). Most ranks of a hung job wait in the same collective at the same line;
the ranks that are somewhere else are the ones the others wait for (BLOOM's "6 processes are in
train, 2 are in broadcast", done by hand on 48 nodes). With NCCL a collective's Python call
returns at once and the collective runs on the GPU's stream, so a rank held by it is seen at its
next wait for the GPU (``torch.cuda.synchronize``, ``.item()``): that is a wait too.
"""

from __future__ import annotations

import linecache
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from monitor.diagnosis.advice import advice
from monitor.model import Category, Finding, Severity, rank_words
from monitor.stacks.model import Capture, Frame, ProcessStack

RULE = "stacks"
# The capture's trigger when a collective's timeout fired (session/job_session.py).
TIMED_OUT = "timeout"
# torch.distributed's collectives and waits (distributed_c10d.py), by the name py-spy shows.
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "broadcast", "broadcast_object_list", "barrier",
    "monitored_barrier", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_gather_coalesced", "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor",
    "_reduce_scatter_base", "all_to_all", "all_to_all_single", "reduce", "gather", "gather_object",
    "scatter", "scatter_object_list", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "send_object_list", "recv_object_list", "wait", "new_group", "init_process_group",
})
# Where DDP waits for its gradient all-reduce: inside loss.backward(), in autograd's engine.
_BACKWARD = ("torch/autograd/", frozenset({"backward", "_engine_run_backward"}))
# Where the host waits for the GPU's queued work: torch.cuda's synchronize calls (torch/cuda/__init__.py,
# streams.py) and torch.accelerator's (torch/accelerator/__init__.py), by the names py-spy shows, and
# the copies to the host that wait the same way (no Python frame of their own: read from the rank's
# own line of code; a CUDA tensor's .numpy() needs .cpu() first).
_GPU_SYNC = (("torch/cuda/", "torch/accelerator/"), frozenset({"synchronize", "Stream.synchronize", "Event.synchronize"}))
_HOST_COPY = re.compile(r"\.(?:item|cpu|tolist)\(\)|\.to\(\s*['\"]cpu['\"]\s*\)")
_LIBRARY_MARKS = ("/site-packages/", "/dist-packages/", "<frozen ", "/lib/python3")
# The standard library's modules whose frame innermost in a stopped process means it sleeps in a
# wait of the operating system's (a lock, a condition, select, a pipe or socket read, a child's
# exit), not in work: nothing moves it but another thread's or process's act.
_BLOCKING_MODULES = ("/threading.py", "/queue.py", "/selectors.py", "/socket.py", "/subprocess.py",
                     "/multiprocessing/connection.py", "/multiprocessing/queues.py", "/multiprocessing/pool.py",
                     "/multiprocessing/synchronize.py", "/concurrent/futures/_base.py")
EVIDENCE_FRAMES = 6
# The kinds of finding ``analyse`` makes where some ranks are the odd ones out (``Finding.ranks``).
ODD_KINDS = ("stuck", "mismatch", "elsewhere", "rest-gone")


@dataclass(frozen=True, slots=True)
class Place:
    """Where one rank is: the collective it waits in ("" when none), its own code's frame,
    outside a collective the call that waits for the GPU ("" when none), and the standard
    library's call it sleeps in ("" when none: ``blocked_in``)."""

    collective: str
    frame: Frame
    gpu_wait: str = ""
    # Not the place's identity: ranks at one line are one group whatever each waits in.
    blocked: str = field(default="", compare=False)

    def describe(self, plural: bool = False) -> str:
        where = f"{self.frame.function} ({Path(self.frame.file).name}:{self.frame.line})"
        if self.collective:
            return advice("stacks-place-wait" if plural else "stacks-place-waits", collective=self.collective, where=where)
        if self.gpu_wait:
            return advice("stacks-place-wait-gpu" if plural else "stacks-place-waits-gpu", call=self.gpu_wait, where=where)
        return advice("stacks-place-are" if plural else "stacks-place-is", where=where)


def place_of(stack: ProcessStack) -> Place | None:
    thread = stack.main_thread()
    if thread is None or not thread.frames:
        return None
    collective = ""
    for frame in thread.frames:  # innermost first: the last match is the outermost
        if "torch/distributed/" in frame.file and frame.function in COLLECTIVES:
            collective = frame.function
        elif not collective and _BACKWARD[0] in frame.file and frame.function in _BACKWARD[1]:
            collective = "backward"
    own = next((f for f in thread.frames if is_user_code(f.file)), thread.frames[0])
    return Place(collective, own, "" if collective else _gpu_wait(thread.frames, own), blocked_in(thread.frames))


def blocked_in(frames: list[Frame]) -> str:
    """The standard library's call a main thread sleeps in (innermost frames first): the
    outermost of the blocking modules' frames it is inside ("Queue.get" around "Condition.wait");
    "" when it is not blocked there (a time.sleep ends by itself: a poll's, a backoff's)."""
    called = ""
    for frame in frames:
        if not frame.file.endswith(_BLOCKING_MODULES):
            break
        called = frame.function
    return called


def _gpu_wait(frames: list[Frame], own: Frame) -> str:
    """The call by which a rank outside any collective waits for its GPU ("" when none)."""
    for frame in frames:
        module = next((m for m in _GPU_SYNC[0] if m in frame.file), None)
        if module is not None and frame.function in _GPU_SYNC[1]:
            return module.replace("/", ".") + frame.function
    if frames[0] is own and (copy := _HOST_COPY.search(source_line(own))):
        return copy.group(0)
    return ""


def is_user_code(file: str) -> bool:
    return not any(mark in file for mark in _LIBRARY_MARKS)


def source_line(frame: Frame) -> str:
    """The line of code at ``frame`` when its file is readable here ("" otherwise)."""
    return linecache.getline(frame.file, frame.line).strip() if frame.file.startswith("/") else ""


def groups_of(capture: Capture) -> list[tuple[Place, list[ProcessStack]]]:
    """The ranks grouped by where they are, the biggest group first."""
    places: dict[Place, list[ProcessStack]] = defaultdict(list)
    for stack in capture.ranked():
        if (place := place_of(stack)) is not None:
            places[place].append(stack)
    return sorted(places.items(), key=lambda item: (-len(item[1]), _first_rank(item[1])))


def analyse(capture: Capture, stacks_file: str = "") -> Finding | None:
    """The finding a capture makes (None: no stack to compare). ``stacks_file``: where the
    whole stacks are kept, for the remedy."""
    groups = groups_of(capture)
    if not groups:
        return None
    # Beside ranks held in a torch.distributed collective, a rank at a GPU wait is not waiting for
    # them: it is working (a step, an evaluation) and is the one they wait for.
    in_collective = any(place.collective for place, _ in groups)
    waiting = [g for g in groups if g[0].collective or (g[0].gpu_wait and not in_collective)]
    elsewhere = [g for g in groups if g not in waiting]
    if waiting and elsewhere:
        odd, usual, kind = elsewhere, waiting, "stuck"
    elif len(groups) > 1 and len(groups[0][1]) > len(groups[1][1]):
        odd, usual, kind = groups[1:], groups[:1], ("mismatch" if in_collective else "elsewhere")
    elif len(groups) > 1:
        odd, usual, kind = groups, [], ("mismatch" if in_collective else "elsewhere")
    elif len(groups[0][1]) < len({p.rank for p in capture.processes if p.rank is not None}):
        odd, usual, kind = groups, [], "rest-gone"  # the others have no stack: exiting, or gone
    elif waiting:
        odd, usual, kind = [], groups, "all-wait"
    else:
        asleep = all((place := place_of(stack)) is not None and place.blocked for stack in groups[0][1])
        odd, usual, kind = [], groups, ("all-blocked" if asleep else "all-busy")
    return _finding(capture, groups, odd, usual, kind, stacks_file)


def _finding(capture: Capture, groups, odd, usual, kind: str, stacks_file: str) -> Finding:
    odd_ranks = sorted(r for _, stacks in odd for r in _ranks(stacks))
    all_ranks = sorted(r for _, stacks in groups for r in _ranks(stacks))
    parts = [f"{who(stacks)} {place.describe(len(stacks) > 1)}" for place, stacks in odd + usual]
    if kind == "all-wait":
        title = advice("title-stacks-all-wait", place=groups[0][0].describe())
    elif kind == "all-busy":
        title = advice("title-stacks-all-busy", place=groups[0][0].describe())
    elif kind == "all-blocked":
        title = advice("title-stacks-all-blocked", call=groups[0][0].blocked, place=groups[0][0].describe())
    elif kind == "rest-gone":
        title = advice("title-stacks-rest-gone", part=parts[0])
    else:
        title = advice("title-stacks-while", odd=parts[0], others="; ".join(parts[1:])) if len(parts) > 1 else parts[0]
    severities: dict[str, Severity] = {"stuck": "error", "mismatch": "error", "elsewhere": "warning", "all-wait": "warning",
                                       "all-blocked": "warning"}
    # Every rank at a GPU wait is also how a busy GPU-bound step looks for a moment: a hang only
    # where a collective timed out, else a note.
    passing = kind == "all-wait" and not groups[0][0].collective and capture.trigger != TIMED_OUT
    severity = "info" if passing else severities.get(kind, "info")
    subject = odd[0] if odd else groups[0]
    place = subject[0]
    fields = {"kind": kind, "function": place.frame.function, "file": place.frame.file,
              "line": str(place.frame.line), "trigger": capture.trigger, "taken": f"{capture.taken:.3f}"}
    if place.collective:
        fields["collective"] = place.collective
    if place.gpu_wait:
        fields["gpu_wait"] = place.gpu_wait
    if place.blocked:
        fields["blocked"] = place.blocked
    if code := source_line(place.frame):
        fields["code"] = code
    if stacks_file:
        fields["stacks_file"] = stacks_file
    return Finding(
        rule=RULE, category=Category.HANG, severity=severity, role="root", title=title, origin="stacks",
        rank=odd_ranks[0] if len(odd_ranks) == 1 else None, ranks=odd_ranks or all_ranks,
        file=place.frame.file, line=place.frame.line, count=1,
        evidence=[_evidence(place, stacks) for place, stacks in groups] + _not_taken(capture),
        fields=fields, remedy=_remedy(kind, capture, odd, usual, fields, passing), first_seen=capture.taken,
    )


def _evidence(place: Place, stacks: list[ProcessStack]) -> str:
    thread = stacks[0].main_thread()
    frames = thread.frames[:EVIDENCE_FRAMES] if thread else []
    pids = ",".join(str(s.pid) for s in stacks)
    return f"{who(stacks)} (pid {pids}): " + " <- ".join(f.short() for f in frames)


def _not_taken(capture: Capture) -> list[str]:
    return [p.error_line() for p in capture.processes if p.error]


def _remedy(kind: str, capture: Capture, odd, usual, fields: dict[str, str], passing: bool) -> str:
    """``passing``: every rank at a GPU wait with no collective's timeout (see ``_finding``)."""
    place = {"function": fields["function"], "where": f"{Path(fields['file']).name}:{fields['line']}",
             "code": f" (`{fields['code']}`)" if fields.get("code") else ""}
    timeout = advice("stacks-timeout")
    missing = _missing_ranks(capture)
    if kind == "stuck":
        stuck = who(odd[0][1])
        lines = [advice("stacks-stuck", Stuck=stuck[0].upper() + stuck[1:], stuck=stuck, timeout=timeout,
                        collective=_collective_words(usual[0][0]), **place)]
    elif kind == "mismatch":
        lines = [advice("stacks-mismatch", **place)]
    elif kind == "rest-gone":
        lines = [advice("stacks-rest-gone", who=who(odd[0][1]), **place)]
    elif kind == "elsewhere":
        lines = [advice("stacks-elsewhere", who=who(odd[0][1]), **place)]
    elif kind == "all-wait" and fields.get("gpu_wait"):
        lines = [advice("stacks-all-wait-gpu", call=fields["gpu_wait"], **place)]
        if passing:
            lines.append(advice("stacks-again"))
    elif kind == "all-wait":
        lines = [advice("stacks-all-wait", collective=fields.get("collective") or advice("stacks-a-collective"),
                        **place)]
    elif kind == "all-blocked":
        lines = [advice("stacks-all-blocked", call=fields["blocked"], **place)]
    else:
        lines = [advice("stacks-all-busy", **place)]
    if missing and kind == "all-wait":  # the rank the others wait for may be on another node
        lines.append(advice("stacks-all-wait-missing", missing=missing))
    elif missing:
        lines.append(advice("stacks-missing-not-compared", missing=missing))
    if kind == "all-wait" and not passing:
        lines.append(advice("stacks-transport", timeout=timeout))
    saved = advice("stacks-saved", stacks_file=fields["stacks_file"]) if fields.get("stacks_file") else ""
    return "\n".join(lines) + saved


def _collective_words(place: Place) -> str:
    if place.gpu_wait:
        return advice("stacks-gpu-wait-words", call=place.gpu_wait)
    return advice("stacks-ddp-backward") if place.collective == "backward" else place.collective


def _missing_ranks(capture: Capture) -> str:
    seen = {p.rank for p in capture.processes if p.rank is not None}
    if not capture.world_size or len(seen) >= capture.world_size:
        return ""
    absent = sorted(set(range(capture.world_size)) - seen)
    return advice("stacks-missing", absent=str(len(absent)), world=str(capture.world_size), host=capture.host)


def _ranks(stacks: list[ProcessStack]) -> list[int]:
    return [s.rank for s in stacks if s.rank is not None]


def _first_rank(stacks: list[ProcessStack]) -> int:
    ranks = _ranks(stacks)
    return min(ranks) if ranks else 1 << 30


def who(stacks: list[ProcessStack]) -> str:
    ranks = sorted(_ranks(stacks))
    return rank_words(ranks) if ranks else "pid " + ",".join(str(s.pid) for s in stacks)
