"""Matching every rank's flight-recorder dump, collective by collective, as torch's analyser
(``torch.distributed.flight_recorder.fr_trace``) does, without torch.

Per process group, the collectives are matched by sequence number (``collective_seq_id``):
- the ranks of the group that never enqueued the last collective the others did are the ranks
  the others wait for ("not all ranks joining collective N");
- a collective whose op, sizes or dtypes differ between ranks can never complete: the first one
  per group is reported (what follows it is a consequence).
Ranks of the group with no dump at all are named, not guessed about.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from monitor.diagnosis.advice import advice
from monitor.flight_recorder.dumps import Entry, RankDump
from monitor.model import Category, Finding, rank_words

MISSING_RULE = "flight-recorder-missing-rank"
MISMATCH_RULE = "flight-recorder-mismatch"
# Ops whose inputs must have the same shape and dtype on every rank (an all_to_all may be uneven).
_SAME_INPUT_OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "_allgather_base", "all_gather_into_tensor",
                   "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "allreduce_coalesced")


def analyse(dumps: list[RankDump]) -> list[Finding]:
    """The findings of a set of dumps (one per rank, of one job)."""
    findings: list[Finding] = []
    by_group: dict[str, dict[int, list[Entry]]] = defaultdict(dict)
    for dump in dumps:
        for entry in dump.entries:
            if not entry.is_p2p:
                by_group[entry.group].setdefault(dump.rank, []).append(entry)
    for group, per_rank in sorted(by_group.items()):
        members = _members(dumps, group, per_rank)
        mismatch = _first_mismatch(group, per_rank)
        if mismatch is not None:
            findings.append(mismatch)
        missing = _missing(group, per_rank, members, {dump.rank for dump in dumps})
        if missing is not None:
            findings.append(missing)
    return findings


def _members(dumps: list[RankDump], group: str, per_rank: dict[int, list[Entry]]) -> list[int]:
    for dump in dumps:
        # gloo keys the default group '' in pg_config while its entries call it '0'.
        ranks = dump.groups.get(group) or (dump.groups.get("") if group == "0" else None)
        if ranks:
            return sorted(ranks)
    return sorted(per_rank)


def _first_mismatch(group: str, per_rank: dict[int, list[Entry]]) -> Finding | None:
    by_seq: dict[int, dict[int, Entry]] = defaultdict(dict)
    for rank, entries in per_rank.items():
        for entry in entries:
            by_seq[entry.seq][rank] = entry
    for seq in sorted(by_seq):
        at_seq = by_seq[seq]
        if len(at_seq) < 2:
            continue
        for what, key in (("op", lambda e: e.op), ("input sizes", _input_signature)):
            signatures = {rank: key(entry) for rank, entry in at_seq.items()}
            if len(set(map(repr, signatures.values()))) > 1:
                return _mismatch_finding(group, seq, at_seq, signatures, what)
    return None


def _input_signature(entry: Entry):
    op = entry.op.split(":")[-1]
    if op not in _SAME_INPUT_OPS:
        return None
    return (entry.input_sizes, entry.input_dtypes)


def _mismatch_finding(group: str, seq: int, entries: dict[int, Entry], signatures: dict, what: str) -> Finding:
    groups: dict[str, list[int]] = defaultdict(list)
    for rank, signature in sorted(signatures.items()):
        groups[repr(signature)].append(rank)
    ordered = sorted(groups.values(), key=lambda ranks: (len(ranks), ranks[0]))
    odd = ordered[0] if len(ordered[0]) < len(ordered[-1]) else []
    first = entries[ordered[0][0]]
    parts = [advice("fr-called", ranks=rank_words(ranks), call=_call(entries[ranks[0]], what)) for ranks in ordered]
    site = first.call_site()
    differs = advice("fr-differs-op") if what == "op" else advice("fr-differs-input-sizes")
    title = advice("title-fr-mismatch", seq=str(seq), group=_group_name(first), differs=differs, calls="; ".join(parts))
    evidence = [f"rank {rank}: {_call(entry, 'input sizes')} at {_where(entry)}" for rank, entry in sorted(entries.items())]
    return Finding(
        rule=MISMATCH_RULE, category=Category.HANG, severity="error", role="root", title=title,
        origin="flight-recorder", rank=odd[0] if len(odd) == 1 else None, ranks=odd or sorted(entries),
        file=site.file if site else "", line=site.line if site else 0, evidence=evidence,
        fields={"group": group, "seq": str(seq), "differs": what},
        remedy=advice("fr-mismatch", sites=", ".join(sorted({_where(e) for e in entries.values()}))),
    )


def _missing(group: str, per_rank: dict[int, list[Entry]], members: list[int], dumped: set[int]) -> Finding | None:
    last = {rank: max(e.seq for e in entries) for rank, entries in per_rank.items() if entries}
    if not last:
        return None
    top = max(last.values())
    # A member that dumped but never used the group is behind too (it has not even started).
    behind = sorted([rank for rank, seq in last.items() if seq < top] + [r for r in members if r in dumped and r not in last])
    joined = sorted(rank for rank, seq in last.items() if seq == top)
    undumped = sorted(set(members) - dumped)
    completed = [e for rank in joined for e in per_rank[rank] if e.seq == top and (e.retired or e.state == "completed")]
    if not behind or len(completed) == len(joined):
        return None
    entry = next(e for e in per_rank[joined[0]] if e.seq == top)
    site = entry.call_site()
    behind_at = {rank: max(per_rank[rank], key=lambda e: e.seq) for rank in behind if rank in per_rank}
    at_top = {rank: next(e for e in per_rank[rank] if e.seq == top) for rank in joined}
    sites = ", ".join(sorted({_where(e) for e in at_top.values()}))
    ops = "/".join(sorted({e.op for e in at_top.values()}))
    title = advice("title-fr-missing-one" if len(joined) == 1 else "title-fr-missing-many", behind=rank_words(behind),
                   seq=str(top), op=ops, group=_group_name(entry), joined=rank_words(joined), sites=sites)
    evidence = [f"{rank_words([rank])} last enqueued collective {e.seq} ({e.op}) at {_where(e)}" for rank, e in behind_at.items()]
    evidence += [f"rank {rank} enqueued collective {top} ({e.op}) at {_where(e)}" for rank, e in at_top.items()]
    if undumped:
        evidence.append(f"no dump from {rank_words(undumped)} (another node, or it could not dump)")
    timeout = advice("fr-timeout-here", seconds=f"{entry.timeout_ms / 1000:g}") if entry.timeout_ms else ""
    last_seen = advice("fr-last-seen", seq=str(min(e.seq for e in behind_at.values())),
                       where=_where(next(iter(behind_at.values())))) if behind_at else ""
    remedy = advice("fr-missing", behind=rank_words(behind), last_seen=last_seen, timeout=timeout)
    return Finding(
        rule=MISSING_RULE, category=Category.HANG, severity="error", role="root", title=title,
        origin="flight-recorder", rank=behind[0] if len(behind) == 1 else None, ranks=behind,
        file=site.file if site else "", line=site.line if site else 0, evidence=evidence,
        fields={"group": group, "seq": str(top), "op": ops, "missing": ",".join(map(str, behind)),
                "joined": ",".join(map(str, joined))} | ({"timeout_ms": str(entry.timeout_ms)} if entry.timeout_ms else {}),
        remedy=remedy,
    )


def _call(entry: Entry, what: str) -> str:
    if what == "op":
        return advice("fr-op-at", op=entry.op, where=_where(entry))
    return f"{entry.op} {entry.input_sizes} {'/'.join(map(str, entry.input_dtypes))}"


def _where(entry: Entry) -> str:
    site = entry.call_site()
    return f"{site.function} ({Path(site.file).name}:{site.line})" if site else advice("fr-unknown-place")


def _group_name(entry: Entry) -> str:
    if entry.group_desc == "default_pg":
        return advice("fr-default-group")
    return advice("fr-group", group=str(entry.group), description=entry.group_desc)
