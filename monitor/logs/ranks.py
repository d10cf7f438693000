"""Which rank (or process) a log line came from: line prefixes, NCCL's own tags, file names.

Prefixes recognised at the start of a line (removed before rules are matched):

- ``[rank3]:`` (PyTorch's excepthook and C++ logs after init_process_group; ``[rank3] `` too,
  as scripts print it),
- ``[default3]:`` (torchrun ``--tee``/``--redirects`` with a role name: ``[<role><rank>]:``),
- ``3: `` (``srun --label``),
- ``[1,3]<stderr>:`` (Open MPI ``mpirun --tag-output``: job 1, rank 3),
- ``(pid=123)`` / ``(RayTrainWorker pid=123, ip=...)`` (Ray: no rank, the pid keeps streams apart),
- ``c000001: `` (pdsh, DeepSpeed's multi-node runner: no rank, the host keeps streams apart),
- any of these after a date and time (``2024-11-20 14:37:16 [rank3]:``), which stays in the body.

Inside the text, ProcessGroupNCCL tags its lines with ``[Rank 3]``, ``[PG 3 Rank 4]``,
``[PG 0 (default_pg) Rank 1]`` or ``[PG ID 0 PG GUID 0(default_pg) Rank 3]``: ``rank_in_text`` reads those. NCCL's own
``host:pid:tid [3] NCCL WARN`` carries the *CUDA device* in brackets, which is the local rank
only under the usual one-GPU-per-process mapping and never the global rank on multi-node jobs:
we do not read it as a rank, and use ``host:pid`` to keep such lines in their own stream.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import regex

from monitor.logs.nodes import Node, node_of, read_node

_PREFIX = regex.compile(
    r"^(?:"
    r"\[rank(?P<rank>\d+)\]:?\s?"                             # [rank3]: (and [rank3] from user prints)
    r"|\[[A-Za-z_][\w-]*?(?P<role_rank>\d+)\]:\s?"            # torchrun [default3]: / [trainer3]:
    r"|\[\d+,(?P<mpi>\d+)\]<(?:stdout|stderr)>:\s?"          # [1,3]<stderr>:
    r"|\s{0,4}(?P<label>\d{1,5}): "                           # srun --label
    r"|\((?:[\w.-]+ )?pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s?"   # Ray
    r")"
)
# ProcessGroupNCCL's log prefix by era: ``[Rank 3]``; ``[PG 3 Rank 4]`` (2.2); ``[PG 0 (default_pg)
# Rank 1]`` (2.3, 2.4); ``[PG ID 0 PG GUID 0(default_pg) Rank 3]`` (2.5+). The PG name or GUID can be
# a user's group name, the description in parentheses any group_desc (spaces included).
_NCCL_TAG = regex.compile(r"\[(?:PG (?:ID \d+ PG GUID )?[^\s()\[\]]+ ?(?:\([^()\[\]]*\) ?)?)?Rank (\d+)\]")
# A date and time a logging wrapper or ``ts`` wrote before the rank's own prefix
# (``2024-11-20 14:37:16 [rank3]: ...``): the prefix is still the rank's; the time stays in the body.
_LEADING_TIME = regex.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? ")
# pdsh (DeepSpeed's multi-node runner, ``pdsh -w``) writes each remote line as ``host: line``: a
# host name holds a digit (``c000001``, ``gpu-q-13``, ``trainer-2``), which keeps words such as
# ``wandb:`` or ``Error:`` out. The host keeps a node's streams apart; any rank prefix follows it.
_PDSH_HOST = regex.compile(r"(?P<host>(?=[\w.-]{0,62}\d)[A-Za-z][\w.-]{0,62}): ")
_NCCL_HOST = regex.compile(r"^(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[\d+\] NCCL ")

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


def _may_have_prefix(text: str) -> bool:
    """Whether ``text`` starts as one of ``_PREFIX``'s alternatives can (``[``, ``(``, a digit or
    whitespace): this runs on every line, and a plain line then skips the regex."""
    first = text[:1]
    return first == "[" or first == "(" or first.isdigit() or first.isspace()


def parse_prefix(text: str) -> Prefix:
    """The rank or stream tag at the start of ``text``, and the text without the prefix."""
    match = _PREFIX.match(text) if _may_have_prefix(text) else None
    if match is None and text[:1].isdigit() and (time := _LEADING_TIME.match(text)) is not None:
        inner = parse_prefix(text[time.end():])
        if inner.rank is not None or inner.stream is not None:
            return Prefix(inner.rank, inner.stream, text[:time.end()] + inner.body, inner.local)
    if match is None and text[:1].isalpha() and (pdsh := _PDSH_HOST.match(text)) is not None:
        inner = parse_prefix(text[pdsh.end():])
        return Prefix(inner.rank, inner.stream or f"host={pdsh['host']}", inner.body, inner.local)
    if match is None:
        host = _NCCL_HOST.match(text) if " NCCL " in text else None
        return Prefix(None, f"{host['host']}:{host['pid']}" if host else None, text)
    body = text[match.end():]
    kind = match.lastgroup  # each alternative of _PREFIX has one group
    rank_text = match[kind]
    # Prefixes can stack: srun --label around torchrun --tee around the excepthook's [rankN]:.
    inner = _PREFIX.match(body) if _may_have_prefix(body) else None
    if inner is not None and inner.lastgroup != "pid":
        kind = inner.lastgroup
        rank_text = inner[kind]
        body = body[inner.end():]
    if kind == "pid":
        return Prefix(None, f"pid={match['pid']}", body)
    return Prefix(int(rank_text), None, body, local=kind == "role_rank")


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
        if local not in node.ranks and node.rank_offset is None and time.monotonic() >= self._next_look:
            # A live node whose ranks had not started when this file was opened (a c10d rendezvous
            # hands out node ranks): look at its node.json again, every few seconds at most.
            self._next_look = time.monotonic() + NODE_LOOK_EVERY_S
            node = self.node = read_node(node.folder) or node
        return node.global_rank(local)


def _is_torchrun_layout(path: str) -> bool:
    return os.path.basename(path).removesuffix(".gz") in _TORCHRUN_STREAMS and os.path.basename(os.path.dirname(path)).isdigit()


def rank_in_text(text: str) -> int | None:
    """The rank of an NCCL ``[Rank N]``/``[PG ... Rank N]`` tag inside a line, if any."""
    match = _NCCL_TAG.search(text)
    return int(match.group(1)) if match else None


def rank_from_path(path: str) -> int | None:
    """The rank a per-rank log file belongs to, from its name or torchrun's --log-dir layout.

    ``.../attempt_0/3/stderr.log`` -> 3, ``rank3.log`` / ``rank_3.txt`` / ``job-rank-3.out`` -> 3.
    """
    if _is_torchrun_layout(path):
        return int(os.path.basename(os.path.dirname(path)))
    match = _PATH_RANK.search(os.path.basename(path))
    return int(match.group(1)) if match else None
