"""Which rank (or process) a log line came from: line prefixes, NCCL's own tags, file names.

The prefixes recognised at the start of a line (removed before rules are matched), the leads
before them (a time, a pdsh host) and the rank tags inside a line are data, with samples:
``formats.toml``. Among them: ``[rank3]:`` (PyTorch's excepthook), ``[default3]:``
(torchrun ``--tee``: a local rank), ``3: `` (``srun --label``), ``[1,3]<stderr>:`` (``mpirun
--tag-output``), ``(RayTrainWorker pid=123, ip=...)`` (Ray: no rank, the pid keeps streams
apart), ``c000001: `` (pdsh: the host keeps a node's streams apart), any of them after a date
and time (which stays in the body); inside the text, ProcessGroupNCCL's ``[PG ... Rank 3]``.
NCCL's own ``host:pid:tid [3] NCCL WARN`` carries the *CUDA device* in brackets, which is the
local rank only under the usual one-GPU-per-process mapping and never the global rank on
multi-node jobs: it is not read as a rank, and ``host:pid`` keeps such lines in their own stream.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import regex

from monitor.formats import HEADERS, LEADS, PREFIX_TABLE, RANK_TAG, STREAMS
from monitor.logs.nodes import Node, node_of, read_node


_PATH_RANK = regex.compile(r"(?i)(?:^|[^a-z0-9])rank[-_]?(\d+)(?:[^0-9]|$)")
_TORCHRUN_STREAMS = {"stdout.log", "stderr.log", "error.json"}
# How often a node's rank map is read again while a local rank has no global one yet.
NODE_LOOK_EVERY_S = 2.0


@dataclass(frozen=True, slots=True)
class Prefix:
    rank: int | None
    # What keeps this line's stream apart from others when there is no rank (Ray pid, NCCL host:pid).
    stream: str | None
    body: str
    # The rank is the node's local rank (torchrun's ``[default1]:``), not the job's global one.
    local: bool = False
    # A date and time written before the prefix (a logging wrapper, ``ts``): not part of the
    # program's own text (``body``), but when it was written.
    lead: str = ""


# What a lead's first character is (``formats.Lead.first``): a cheap test before its regex.
_STARTS = {"stamp": lambda first: first.isdigit() or first == "[", "alpha": str.isalpha, "quote": lambda first: first == ">",
           "table": lambda first: first == "|" or first == " ", "backtick": lambda first: first == "`"}


def _may_have_prefix(text: str) -> bool:
    """Whether ``text`` starts as one of the prefixes can (``[``, ``(``, a digit or whitespace):
    this runs on every line, and a plain line then skips the regex."""
    first = text[:1]
    return first == "[" or first == "(" or first == ">" or first.isdigit() or first.isspace()


def _number(match: regex.Match) -> tuple[str, str]:
    """(what the matched prefix's number is, the number)."""
    kinds = PREFIX_TABLE.kinds
    group = match.lastgroup if match.lastgroup in kinds else next(g for g in kinds if match[g] is not None)
    return kinds[group], match[group]


def parse_prefix(text: str) -> Prefix:
    """The rank or stream tag at the start of ``text``, and the text without the prefix."""
    match = PREFIX_TABLE.pattern.match(text) if _may_have_prefix(text) else None
    if match is None:
        first = text[:1]
        for lead in LEADS:
            if not _STARTS[lead.first](first):
                continue
            if (found := lead.pattern.match(text)) is None:
                continue
            inner = parse_prefix(text[found.end():])
            if lead.keeps == "nothing":  # a quote: the paste's, not the program's
                return inner
            if lead.keeps == "header":  # the program's logger: when and how loud, not what
                return Prefix(inner.rank, inner.stream, inner.body, inner.local, text[:found.end()] + inner.lead)
            if lead.keeps == "stream":  # a host: it names the stream where no rank or pid does
                return Prefix(inner.rank, inner.stream or f"host={found['host']}", inner.body, inner.local, inner.lead)
            # a time: when, not what
            return Prefix(inner.rank, inner.stream, inner.body, inner.local, text[:found.end()] + inner.lead)
        for literal, pattern in STREAMS:
            if literal in text and (own := pattern.match(text)) is not None:
                return Prefix(None, ":".join(own.groups()), text)
        return Prefix(None, None, text)
    body = text[match.end():]
    kind, number = _number(match)
    # Prefixes can stack: srun --label around torchrun --tee around the excepthook's [rankN]:.
    inner_match = PREFIX_TABLE.pattern.match(body) if _may_have_prefix(body) else None
    if inner_match is not None and (inner_number := _number(inner_match))[0] != "pid":
        kind, number = inner_number
        body = body[inner_match.end():]
    # A logger's head after the prefix (vLLM's workers: "(VllmWorker rank=2 pid=9) ERROR 06-17 ...] ").
    head = next((found for header in HEADERS if _STARTS[header.first](body[:1]) and (found := header.pattern.match(body))), None)
    written, body = (head[0], body[head.end():]) if head is not None else ("", body)
    if kind == "pid":
        return Prefix(None, f"pid={number}", body, lead=written)
    return Prefix(int(number), None, body, local=kind == "local", lead=written)


class FileRanks:
    """How the lines of one file get their rank, post-mortem and live alike: a line's prefix,
    else the file's name (``rank_from_path``); in a node's folder of a multi-node job
    (``logs/nodes.py``) local ranks become the job's global ranks."""

    __slots__ = ("node", "file_rank", "_next_look")

    def __init__(self, path: str) -> None:
        self.node: Node | None = node_of(path)
        rank = rank_from_path(path)
        if rank is not None and self.node is not None and _is_torchrun_layout(path):
            rank = self.node.global_rank(rank)  # --log-dir's folders are local ranks
        self.file_rank = rank
        self._next_look = 0.0

    def of(self, text: str) -> int | None:
        """The rank of one line of this file."""
        if _may_have_prefix(text):
            prefix = parse_prefix(text)
            if prefix.rank is not None:
                return self._global(prefix.rank) if prefix.local and self.node else prefix.rank
        return self.file_rank

    def _global(self, local: int) -> int:
        node = self.node
        assert node is not None  # ``of`` asks only for a file in a node's folder
        if local not in node.ranks and node.rank_offset is None and time.monotonic() >= self._next_look:
            # A live node whose ranks had not started when this file was opened (a c10d rendezvous
            # hands out node ranks): look at its node.json again, every few seconds at most.
            self._next_look = time.monotonic() + NODE_LOOK_EVERY_S
            node = self.node = read_node(node.folder) or node
        return node.global_rank(local)


def _is_torchrun_layout(path: str) -> bool:
    return os.path.basename(path).removesuffix(".gz") in _TORCHRUN_STREAMS and os.path.basename(os.path.dirname(path)).isdigit()


def rank_in_text(text: str) -> int | None:
    """The rank a tag inside a line names (``formats.toml``, ``[[rank_tag]]``: ProcessGroupNCCL's
    ``[PG ... Rank N]``, Lightning's ``[rank: N]``), if any."""
    match = RANK_TAG.search(text)
    return int(match["rank"]) if match else None


def rank_from_path(path: str) -> int | None:
    """The rank a per-rank log file belongs to, from its name or torchrun's --log-dir layout.

    ``.../attempt_0/3/stderr.log`` -> 3, ``rank3.log`` / ``rank_3.txt`` / ``job-rank-3.out`` -> 3.
    """
    if _is_torchrun_layout(path):
        return int(os.path.basename(os.path.dirname(path)))
    match = _PATH_RANK.search(os.path.basename(path))
    return int(match.group(1)) if match else None
