"""The one root-cause policy: of every finding a job produced (its logs, the metrics, the checks
before the launch, checkpoints, a stall, how it exited), which one is the cause.

``diagnose`` applies it to the log findings (``Engine.root_cause``); the job session
(``monitor/session``) to all of them, so every mode names the same cause for the same job. It is
a pure function of the findings and, among timeouts, the ranks' occurrences (``RankEvidence``).
In order:

1. the earliest error with role ``root`` that is no timeout (``model.is_timeout``: a timeout is a
   symptom of another rank's hang, even where a rule calls it a root), unless its own process went
   on to print a surer one (an exception no rule names that a retry loop logged, then a library's
   own message from the same rank: ``Finding.confidence``); the ranks' stacks so chosen (a rank
   elsewhere while the others wait) take the category of a collective's timeout where one came
   (``_as_its_timeout``: the job ended in it);
2. with timeouts: the earliest stop from outside (``stopped``) when it came before every
   timeout (the ranks lost their peers to the stop; nobody hung); where every timeout says its
   peer went away (``lost_peer``), the launcher's report of another rank that failed first (an
   exit of its own: that is why they lost it); else the hang suspect: the rank a timeout's own
   message names (monitoredBarrier), or the rank that never reached, or never finished, the
   collective the others waited in (where the peers went away: the rank that left the job);
3. with only reports of failures left (cascades), the earliest confirmation a log line made (the
   kernel's OOM kill of a process, SLURM's oom-kill event: what killed the process the reports
   say died) unless a stop from outside is among them, else the earliest report a rule names
   (NCCL's error, torchrun's summary), else the earliest exception that only wraps another
   failure (DistBackendError), else the confirmation;
4. a stall (the job went silent while nothing failed);
5. how the job exited (a bare "exited with 1" says less than any of the above).

A stop from outside chosen so (a time limit, a cancel, a kill) after the training loop said it had
finished is a hang at exit instead (``_hung_after_finishing``); one that ended a silence whose
stacks the stall took is the job stuck there (``_stuck_when_stopped``).

Its rank, where its own lines named none (``with_rank``): the ranks the others waited for, the one
rank another error of its category names in its own message (the same failure said again with the
rank), the launcher's summary, else a local rank where the log shows one node.

"Earliest" is ``model.chronological``. A stop the user asked for (Ctrl-C, ``monitor run``
forwarding a SIGTERM) is no failure: ``as_requested_stop`` turns the launcher's report of
it into information, so it is never chosen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import regex

from monitor.diagnosis.pyexc import RULE_ID as PYTHON_EXCEPTION_RULE
from monitor.model import CONFIDENCE_ORDER, STOPPED, Category, Confidence, Finding, chronological, is_timeout

# Fields (named groups) that hold a rank's last completed collective, as rules name them.
LAST_COMPLETED_FIELDS = ("last_completed", "completed", "done", "last_done")


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One occurrence of a finding: the rank that printed it (None: unknown) and its numbers."""
    rank: int | None
    fields: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class RankEvidence:
    """What tells which rank hung among timeouts: each timeout finding's occurrences (by
    ``Finding.seq``), the ranks known to exist, and the world size when a line said it."""
    occurrences: Mapping[int, tuple[Occurrence, ...]] = field(default_factory=dict)
    known_ranks: frozenset[int] = frozenset()
    world_size: int | None = None



# Not weighed with the log's errors: a stall only when nothing failed, the exit only when
# nothing else explains it.
_LAST_RESORTS = ("stall", "exit")


def choose(findings: list[Finding], ranks: RankEvidence | None = None, lang: str = "en") -> Finding | None:
    """The root cause of ``findings`` (None: nothing failed and nothing stalled); with only
    timeouts, ``ranks`` names the rank that hung (``hang_suspect``)."""
    return _stuck_when_stopped(_hung_after_finishing(_choose(findings, ranks, lang), findings, lang), findings, lang)


# The hang at exit's words (``_hung_after_finishing``), in each output language: title, confidence
# note, remedy; fields {stopped_by}, {finished}, {later}.
HUNG_TEXTS = {
    "en": ("The job did not exit after training finished; stopped by: {stopped_by}",
           "the training loop said it was done before the stop: what ran in between is not in the log",
           "The training loop said it was done ({finished}), and the job was still running {later}when it was "
           "stopped ({stopped_by}).\n"
           "What keeps a finished job alive: a process group never destroyed (call "
           "torch.distributed.destroy_process_group() at the end on every rank), a rank stuck in a last "
           "barrier or collective that another rank skipped, DataLoader workers or a non-daemon thread still "
           "running, wandb.finish() still uploading, a profiler writing its report; or slow work after "
           "training (a final checkpoint save, an evaluation) that the time limit cut short.\n"
           "On the next run take every rank's stacks once training has finished (py-spy dump --pid <pid>) "
           "to see where each process waits."),
    "zh": ("训练结束后作业没有退出；停止它的是：{stopped_by}",
           "训练循环在停止之前就说已经完成：两者之间发生了什么不在日志里",
           "训练循环说已经完成（{finished}），而作业{later}被停止时仍在运行（{stopped_by}）。\n"
           "让一个已完成的作业继续存活的常见原因：进程组没有销毁（在每个 rank 的最后调用 "
           "torch.distributed.destroy_process_group()），某个 rank 卡在另一个 rank 跳过的最后一个 barrier 或集合通信里，"
           "DataLoader worker 或非 daemon 线程仍在运行，wandb.finish() 还在上传，profiler 正在写报告；"
           "或者训练后的慢操作（最后一次保存 checkpoint、一次评估）被时间限制打断。\n"
           "下次运行时，在训练完成后抓取每个 rank 的调用栈（py-spy dump --pid <pid>），看每个进程在等什么。"),
}
# The words this policy writes itself (the hang suspect, the rank a stall report leaves out, the
# confidence it lowers), in each output language.
TEXTS = {
    "en": {
        "fewest": "rank {rank} completed the fewest collectives (last completed work {low})",
        "never_reached": "{ranks} never reported the timeout the others hit: it never reached the collective",
        "elsewhere": "rank {rank} did not time out as {waiters} did: it was not in the collective they waited in, "
                     "and lost them only when they gave up",
        "rank": "rank {ranks}", "ranks": "ranks {ranks}",
        "waited": "the others timed out waiting", "not_ready": "rank {rank} is not among the ranks that were ready ({ready})",
        "not_ready_most": "rank {rank} is missing from {missing} of the {ops} stalled collectives the report lists",
        "waited_for": "the others waited for it",
        "hang": "Hang: {reason}. Look at what rank {rank} was doing last (its final lines, a slow checkpoint or eval, "
                "a data-loader stall, a code path the other ranks did not take).",
        "stalled": "Rank {rank} stalled; {others} ({title})",
        "went_away": "{ranks} went away (exited or crashed) while the others still called collectives",
        "left": "Rank {rank} left the job; {others} ({title})", "lost_it": "the others lost their connection to it",
        "left_remedy": "Rank {rank} left the job: {reason}. Look at how rank {rank} ended (its last lines: an exit of "
                       "its own, a crash, or a loop that ran fewer steps than the others', as an uneven split of the "
                       "data across ranks makes).",
        "only_timeouts": "only timeouts: no rank logged an error of its own, so the rank that hung is inferred "
                         "from which rank the others waited for",
        "only_lost": "only lost connections: no rank logged an error of its own, so the rank that left is inferred "
                     "from which rank the others lost",
        "only_report": "only {what}: the failing process's own error is not in the log",
        "launcher_report": "a launcher's report", "category_report": "a {category} report",
    },
    "zh": {
        "fewest": "rank {rank} 完成的集合通信最少（最后完成的工作 {low}）",
        "never_reached": "{ranks} 没有报告其他 rank 遇到的超时：它从未进入那个集合通信",
        "elsewhere": "rank {rank} 没有像 {waiters} 那样超时：它不在它们等待的集合通信里，只是在它们放弃之后才失去了连接",
        "rank": "rank {ranks}", "ranks": "rank {ranks}",
        "waited": "其他 rank 等它等到了超时", "not_ready": "rank {rank} 不在已就绪的 rank 中（{ready}）",
        "not_ready_most": "报告列出的 {ops} 个停滞的集合通信中，有 {missing} 个缺少 rank {rank}",
        "waited_for": "其他 rank 在等它",
        "hang": "卡住：{reason}。看看 rank {rank} 最后在做什么（它最后的几行、一次很慢的 checkpoint 或评估、"
                "DataLoader 卡住、其他 rank 没有走的一条代码路径）。",
        "stalled": "rank {rank} 卡住了；{others}（{title}）",
        "went_away": "{ranks} 离开了（退出或崩溃了），而其他 rank 还在做集合通信",
        "left": "rank {rank} 离开了作业；{others}（{title}）", "lost_it": "其他 rank 失去了与它的连接",
        "left_remedy": "rank {rank} 离开了作业：{reason}。看看 rank {rank} 是怎么结束的（它最后的几行：它自己退出了、"
                       "崩溃了，或者它的循环比其他 rank 少跑了几步，数据在各 rank 之间分得不均时就会这样）。",
        "only_timeouts": "只有超时：没有哪个 rank 记录了自己的错误，卡住的 rank 是根据其他 rank 在等谁推断出来的",
        "only_lost": "只有断开的连接：没有哪个 rank 记录了自己的错误，离开的 rank 是根据其他 rank 失去了谁推断出来的",
        "only_report": "只有{what}：失败进程自己的错误不在日志里",
        "launcher_report": "启动器的报告", "category_report": "一份 {category} 报告",
    },
}


def _texts(lang: str) -> dict[str, str]:
    return TEXTS.get(lang, TEXTS["en"])


# ``_later`` in each output language: "{n} min later, " / "{n} s later, ".
LATER_TEXTS = {"en": ("{n:.0f} min later, ", "{n:.0f} s later, "), "zh": ("在 {n:.0f} 分钟后", "在 {n:.0f} 秒后")}


def _hung_after_finishing(root: Finding | None, findings: list[Finding], lang: str = "en") -> Finding | None:
    """A stop from outside (a scheduler's time limit or cancel, a kill) that came after the
    training loop said it had finished (a finding of category hang with a ``finished`` field):
    the processes were still running, and the stop only ended the wait. Otherwise ``root``."""
    if root is None or root.category not in (STOPPED, Category.SLURM_EVENT):
        return root
    finished = [f for f in findings if f.category == Category.HANG and f.fields.get("finished")]
    if not finished or chronological([*finished, root])[0] not in finished:
        return root
    done = chronological(finished)[0]
    title, note, remedy = HUNG_TEXTS.get(lang, HUNG_TEXTS["en"])
    words = {"stopped_by": root.title, "finished": done.fields["finished"], "later": _later(done, root, lang)}
    return replace(
        done, severity="error", role="root", confidence="likely", title=title.format(**words),
        confidence_note=note, remedy=remedy.format(**words), fields={**done.fields, "stopped_by": root.title},
    )


# ``_stuck_when_stopped``'s words in each output language: title, confidence note, remedy's first
# line; fields {stopped_by}, {stacks}.
STUCK_TEXTS = {
    "en": ("Stuck, then stopped from outside: {stacks}",
           "the ranks' stacks were taken in the silence the stop ended: the job was stuck there, or slow enough to look it",
           "No output came for a while; the ranks' stacks were taken in that silence, and then the job was stopped from "
           "outside ({stopped_by}): they show where it was stuck."),
    "zh": ("卡住之后被外部停止：{stacks}",
           "各 rank 的调用栈是在被停止前的那段沉默中抓取的：作业卡在那里，或者慢得像是卡住了",
           "有一段时间没有任何输出；各 rank 的调用栈是在那段沉默中抓取的，之后作业被外部停止（{stopped_by}）：调用栈显示了它卡在哪里。"),
}


def _stuck_when_stopped(root: Finding | None, findings: list[Finding], lang: str = "en") -> Finding | None:
    """A stop from outside that ended a silence in which the ranks' stacks were taken: every rank
    in a queue's get, say, where no collective waits and so no timeout comes. The job was stuck,
    and that is why it was stopped: the stacks' finding, as the root. Otherwise ``root``. Such a
    capture is held only while its silence lasts: the session withdraws it once the job trains on
    (``JobSession``), and a run's stacks file read afterwards leaves out a capture its log shows
    training after (``evidence.read_evidence``); so no clock of the log's is compared here."""
    if root is None or root.category not in (STOPPED, Category.SLURM_EVENT):
        return root
    # Every rank at work in the same place (an evaluation, a checkpoint's save) is a note, no
    # hang: a time limit may have cut it short. Asleep in a wait or apart from each other is one.
    taken = [f for f in findings
             if f.origin == "stacks" and f.fields.get("trigger") == "stall" and f.severity != "info"]
    if not taken:
        return root
    stacks = taken[-1]
    title, note, said = STUCK_TEXTS.get(lang, STUCK_TEXTS["en"])
    words = {"stopped_by": root.title, "stacks": stacks.title}
    return replace(
        stacks, severity="error", role="root", confidence="likely", title=title.format(**words),
        confidence_note=note, remedy=said.format(**words) + "\n" + stacks.remedy,
        fields={**stacks.fields, "stopped_by": root.title},
    )


def _later(first: Finding, then: Finding, lang: str = "en") -> str:
    """ "12 min later, " where both findings' lines carry a time, else ""."""
    if first.first_seen is None or then.first_seen is None or then.first_seen < first.first_seen:
        return ""
    seconds = then.first_seen - first.first_seen
    minutes, secs = LATER_TEXTS.get(lang, LATER_TEXTS["en"])
    return minutes.format(n=seconds / 60) if seconds >= 120 else secs.format(n=seconds)


def _choose(findings: list[Finding], ranks: RankEvidence | None, lang: str = "en") -> Finding | None:
    weighed = [f for f in findings if f.origin not in _LAST_RESORTS]
    roots = [f for f in weighed
             if f.role == "root" and f.severity == "error" and not is_timeout(f) and not _after_a_wait(f, weighed)]
    roots = [f for f in roots if not _printed_by_the_program(f, roots, weighed)]
    roots = _of_the_last_attempt(roots, weighed)
    if roots:
        ordered = chronological(roots)
        return _as_its_timeout(next(f for i, f in enumerate(ordered) if not _outlived(f, ordered[i + 1:])), weighed)
    # What the system saw happen to a process (the kernel's OOM kill in the log, an application's
    # Xid from NVML) explains the reports of its death where no rank logged an error of its own.
    confirms = [f for f in weighed if f.severity == "error" and f.role == "confirm" and f.origin in ("log", "metrics")]
    timeouts = [f for f in weighed if is_timeout(f) and f.severity == "error"]
    if timeouts:
        stops = [f for f in weighed if f.category == STOPPED and f.severity == "error"]
        if stops:
            first = chronological(stops + timeouts)[0]
            if first.category == STOPPED:
                return first
        # A GPU that faulted under a rank (its Xid) is why the others waited for it.
        if faulted := [f for f in confirms if f.origin == "metrics"]:
            return chronological(faulted)[0]
        # Ranks that lost their peer, and a launcher that saw another rank fail first (an exit of its
        # own, with no error a rule names: sys.exit, os._exit): that exit is why they lost it.
        # A coordinator's report that names the process it lost (JAX's "Task 1 heartbeat timeout")
        # says which peer the others lost, as well.
        if all(lost_peer(f) for f in timeouts) and (left := _left_first(weighed, timeouts) or _named_lost(weighed)):
            return left
        return hang_suspect(timeouts, ranks, lang, _stopped_by_launcher(weighed)) if ranks is not None else chronological(timeouts)[0]
    errors = [f for f in weighed if f.severity == "error" and f.role != "confirm"]
    # A kill explains reports of processes that died; a stop sent from outside is no such report.
    if confirms and not any(f.category == STOPPED for f in errors):
        return chronological(confirms)[0]
    # An exception that only reports another failure (DistBackendError, ChildFailedError) says less
    # than a rule's name for that failure (NCCL's own error, torchrun's summary), whichever came first.
    if errors:
        return chronological([f for f in errors if f.rule != PYTHON_EXCEPTION_RULE] or errors)[0]
    if confirms:
        return chronological(confirms)[0]
    stalls = [f for f in findings if f.origin == "stall" and f.role == "root"]  # not one that passed
    if stalls:
        return stalls[-1]
    exits = [f for f in findings if f.origin == "exit" and f.severity == "error"]
    return exits[-1] if exits else None


def _of_the_last_attempt(roots: list[Finding], findings: list[Finding]) -> list[Finding]:
    """The ``roots`` of the worker group's last attempt, where torchrun restarted it and its log
    shows errors after the last restart: the job ended in those; the attempts before failed and
    were restarted (each may have failed otherwise: a resumed run meets other state); an error the
    last attempt printed again is of it too (``Finding.last_arrival``). Only within the file of
    torchrun's own lines, whose order is the order things happened."""
    restarts = [f for f in findings if f.rule in RESTART_RULES]  # one finding per restart (``distinct``)
    if not restarts:
        return roots
    last = max(restarts, key=lambda f: f.arrival)
    after = [f for f in roots if f.file == last.file and max(f.arrival, f.last_arrival) > last.arrival]
    return after or roots


def _as_its_timeout(root: Finding, findings: list[Finding]) -> Finding:
    """The ranks' stacks (where each rank was: one elsewhere while the others waited) where a
    collective then timed out: the job ended in that timeout, whose category the root takes; the
    stacks still name the rank and the place."""
    if root.origin != "stacks":
        return root
    timeouts = [f for f in findings if is_timeout(f) and f.severity == "error"]
    return replace(root, category=chronological(timeouts)[0].category) if timeouts else root


def _printed_by_the_program(finding: Finding, roots: list[Finding], findings: list[Finding]) -> bool:
    """Whether ``finding``, an exception no rule names, is not what ended its process. A rank's
    uncaught exception is printed by torch's excepthook, every line behind "[rank<N>]: ", once
    init_process_group has run (before, no rank can print one later: the others wait for it
    there); so a later such report in the same file means: a traceback without the prefix, of the
    same program file, was printed by the program itself (traceback.print_exc, logging.exception)
    and went on, unless the launcher saw a process fail or stopped the others between the two (the
    report is then a consequence: a SIGTERM handler's); and a thread's exception (threading's hook)
    did not stop its rank, which went on to raise that."""
    if finding.rule != PYTHON_EXCEPTION_RULE or finding.fields.get("excepthook"):
        return False
    thread = bool(finding.fields.get("python_thread"))
    for report in roots:
        if (report.rule != PYTHON_EXCEPTION_RULE or report.fields.get("excepthook") != "torch"
                or chronological([finding, report])[0] is not finding):
            continue
        if thread:
            return True
        if report.file != finding.file or report.fields.get("frame_file") != finding.fields.get("frame_file"):
            continue
        if not any(_launcher_acted(other) and chronological([finding, other, report]) == [finding, other, report]
                   for other in findings):
            return True
    return False


def _launcher_acted(finding: Finding) -> bool:
    """A launcher's record of a process that failed (its local rank), or of its stopping the others."""
    return (launcher_record(finding) and finding.severity == "error") or _stopped_by_the_launcher(finding)


def _after_a_wait(finding: Finding, findings: list[Finding]) -> bool:
    """Whether ``finding`` is a launcher's record of a process's death (its local rank) that came
    after a rank timed out waiting (not one that lost its peer): the others waited for that
    process before it died (a hung rank torn down), so its death is no root of its own."""
    if not launcher_record(finding):
        return False
    waits = [f for f in findings if is_timeout(f) and f.severity == "error" and not lost_peer(f)]
    # A wait of an earlier attempt, which the launcher restarted the workers after, is over.
    restarts = [f for f in findings if f.rule in RESTART_RULES]
    return any(chronological([wait, finding])[0] is wait
               and not any(chronological([wait, restart, finding]) == [wait, restart, finding] for restart in restarts)
               for wait in waits)


def _stopped_by_launcher(findings: list[Finding]) -> frozenset[int]:
    """The ranks a launcher stopped itself (torchrun's SIGTERM to the others once one failed)."""
    return frozenset(f.rank for f in findings if f.rank is not None and f.severity == "info" and _stopped_by_the_launcher(f))


def hang_suspect(timeouts: list[Finding], evidence: RankEvidence, lang: str = "en",
                 stopped: frozenset[int] = frozenset()) -> Finding:
    """With only timeouts, the suspect is the rank that never reached (or never finished)
    the collective the others waited in: a timeout whose own message names it (role ``root``:
    rank 0's "Rank N failed to pass monitoredBarrier"), else ``timeouts[0]`` retitled to name the
    rank the occurrences point at, or itself."""
    named = [f for f in timeouts if f.role == "root" and f.rank is not None]
    if named:
        return chronological(named)[0]
    first = timeouts[0]
    reporting: set[int] = set()
    waiting: set[int] = set()  # ranks whose own wait timed out (not a peer lost)
    # A rank a timeout says it waited for exists even where none of its lines is in the log.
    known = set(evidence.known_ranks)
    completed: dict[int, float] = {}
    for finding in timeouts:
        for occurrence in evidence.occurrences.get(finding.seq, ()):
            if occurrence.rank is None:
                continue
            reporting.add(occurrence.rank)
            if not lost_peer(finding):
                waiting.add(occurrence.rank)
            if str(occurrence.fields.get("peer", "")).isdigit():
                known.add(int(occurrence.fields["peer"]))
            for name in LAST_COMPLETED_FIELDS:
                value = occurrence.fields.get(name, "").lstrip("-")
                if value.isdigit():
                    number = float(occurrence.fields[name])
                    completed[occurrence.rank] = min(number, completed.get(occurrence.rank, number))
    suspect, reason = None, ""
    if len(completed) >= 2:
        low = min(completed.values())
        laggards = [r for r, v in completed.items() if v == low]
        if len(laggards) == 1 and any(v > low for v in completed.values()):
            suspect = laggards[0]
            reason = _texts(lang)["fewest"].format(rank=suspect, low=f"{low:g}")
    if suspect is None and reporting:
        missing = _missing(known, reporting, evidence.world_size)
        if all(lost_peer(f) for f in timeouts):
            # Ranks the launcher stopped did not leave of their own: they are not why the peers were lost.
            missing = [rank for rank in missing if rank not in stopped]
        if missing:
            suspect = missing[0]
            who = _texts(lang)["ranks" if len(missing) > 1 else "rank"].format(ranks=", ".join(map(str, missing)))
            left = all(lost_peer(f) for f in timeouts)
            reason = _texts(lang)["went_away" if left else "never_reached"].format(ranks=who)
            if left:
                return _suspected(first, suspect, reason, _texts(lang)["lost_it"], lang, left=True)
    # Only where the job's ranks are all known to have reported: one node's log shows its peers on
    # another node only as lost connections.
    whole = evidence.world_size is not None and reporting == set(range(evidence.world_size))
    if suspect is None and whole and waiting and len(elsewhere := reporting - waiting) == 1:
        # Every rank reported, one of them only a lost peer: it was somewhere else (past a barrier
        # the others waited in, in the next collective) when they timed out and exited.
        suspect = next(iter(elsewhere))
        waiters = _texts(lang)["ranks" if len(waiting) > 1 else "rank"].format(ranks=", ".join(map(str, sorted(waiting))))
        reason = _texts(lang)["elsewhere"].format(rank=suspect, waiters=waiters)
        first = next(f for f in timeouts if not lost_peer(f))  # what the others hit: a wait timed out
    if suspect is None:
        return first
    return _suspected(first, suspect, reason, _texts(lang)["waited"], lang)


# The launcher's word that it restarts the workers (rules/launcher.toml).
RESTART_RULES = frozenset({"torchrun-restart"})
# Timeouts that say their peer went away: gloo's closed, reset or EOF'd connection to a peer address
# (a process that exited or crashed), not a peer that did not answer in time (gloo's "Read timeout",
# "Application timeout caused pair closure", a read that timed out: a hung or vanished peer).
LOST_PEER_RULES = frozenset({"gloo-peer-lost"})


def lost_peer(finding: Finding) -> bool:
    """Whether a timeout finding says its peer went away rather than that it did not answer in time."""
    return (finding.rule in LOST_PEER_RULES and bool(finding.fields.get("peer"))
            and "timed out" not in str(finding.fields.get("read_error", "")))


def _left_first(findings: list[Finding], timeouts: list[Finding]) -> Finding | None:
    """The launcher's first report of a failed process whose rank is not one of the ranks that
    lost their peer; None where it names one of them or none."""
    losing = {rank for f in timeouts for rank in (f.ranks or ([f.rank] if f.rank is not None else []))}
    if not losing:
        return None  # which ranks lost their peer is not said: the report may be of one of them
    report = next((f for f in chronological(findings) if f.severity == "error" and _launcher_saw_fail(f)), None)
    return report if report is not None and report.rank not in losing else None


def _named_lost(findings: list[Finding]) -> Finding | None:
    """The first report of a process lost with its node or by a crash that names its rank."""
    return next((f for f in chronological(findings)
                 if f.category == Category.NODE_FAILURE and f.severity == "error" and f.rank is not None), None)


def _missing(known: set[int], present: set[int], world: int | None) -> list[int]:
    """The ranks known to exist that are not ``present``, lowest first; within the world size
    where one is known (a number misread as a rank prefix must not become the suspect)."""
    return sorted(r for r in known - present if world is None or r < world)


def _suspected(finding: Finding, rank: int, reason: str, others: str, lang: str = "en", left: bool = False) -> Finding:
    """``finding`` retitled to name the rank the others waited for (``left``: that went away), and why."""
    texts = _texts(lang)
    remedy = texts["left_remedy" if left else "hang"].format(reason=reason, rank=rank) + "\n" + finding.remedy
    title = texts["left" if left else "stalled"].format(rank=rank, others=others, title=finding.title)
    return replace(finding, title=title, rank=rank,
                   fields=dict(finding.fields, suspect_rank=str(rank), suspect_reason=reason), remedy=remedy,
                   ranks=list(finding.ranks), evidence=list(finding.evidence), rank_source="hang")


def with_rank(root: Finding | None, findings: list[Finding], evidence: RankEvidence | None = None,
              lang: str = "en") -> Finding | None:
    """``root`` with the rank the launcher names where its own lines named none, or named only
    the rank that reported another's failure (a cascade: Horovod's "has been shut down", a peer's
    lost connection): the rank its summary saw fail first (``rank_source`` "summary"; or the
    process mp.spawn says failed, "launcher"), else the
    local rank it says failed, where the log shows one node's ranks only (``_local_rank``). A
    copy; the finding is unchanged."""
    # A hang's suspect is already the rank the others waited for (``hang_suspect``).
    if root is None or (root.rank is not None and (root.role != "cascade" or root.rank_source == "hang")):
        return root
    # A stall report's own rank prefix is the rank that printed it (Horovod's coordinator, rank 0),
    # not the one it reports missing.
    if (root.rank is None or root.rank_source == "prefix") and (waited := _not_ready(root, evidence, lang)) is not None:
        return waited
    if root.rank is None and (named := _named_by_its_kin(root, findings)) is not None:
        return replace(root, rank=named, ranks=list(root.ranks) or [named], rank_source="related")
    # An error of no rank beside the others' timeouts is the rank they waited for's: the launcher's
    # first failure is then one of those that timed out (a thread's exception on rank 1 left it
    # stuck; rank 0 timed out and exited first).
    if (root.rank is None and evidence is not None and not launcher_record(root)
            and (awaited := _waited_for(findings, evidence)) is not None):
        return replace(root, rank=awaited, ranks=list(root.ranks) or [awaited], rank_source="hang")
    if root.rank is None and root.fields.get("python_thread"):
        return root  # a thread's death ended no process: no launcher's record is of its rank
    summary = next((f for f in chronological(findings) if _launcher_saw_fail(f)), None)
    if summary is not None:
        assert summary.rank is not None  # picked for its rank
        if summary.rank == root.rank:
            return root
        return replace(root, rank=summary.rank, ranks=list(root.ranks) or [summary.rank],
                       rank_source=summary.rank_source)
    if root.rank is not None:
        return root
    local = _local_rank(findings, evidence, root)
    if local is None:
        return root
    return replace(root, rank=local, ranks=list(root.ranks) or [local], rank_source="local")


def _waited_for(findings: list[Finding], evidence: RankEvidence) -> int | None:
    """The rank the timeouts among ``findings`` point at as the one the others waited for (a
    rank their messages name, or the one rank that never reported them), where the launcher saw
    no failure first or saw one of the ranks that timed out; None without such timeouts (a lost
    peer was not waited for: it may be one the launcher stopped), or where they do not say."""
    timeouts = [f for f in findings if is_timeout(f) and f.severity == "error" and not lost_peer(f)]
    if not timeouts:
        return None
    timed_out = {rank for f in timeouts for rank in (f.ranks or ([f.rank] if f.rank is not None else []))}
    summary = next((f for f in chronological(findings) if _launcher_saw_fail(f)), None)
    if summary is not None and summary.rank not in timed_out:
        return None
    suspect = hang_suspect(timeouts, evidence)
    return suspect.rank if suspect.rank_source == "hang" or (suspect.role == "root" and suspect.rank is not None) else None


def _named_by_its_kin(root: Finding, findings: list[Finding]) -> int | None:
    """The one rank that another error of the root's category names in its own message: the
    same failure said twice, once without a rank (a NaN in Megatron's iteration line) and once
    with it ("Rank 114: found NaN in local forward loss calculation"). None when they name
    several ranks or none."""
    named = {rank for f in findings if f is not root and f.category == root.category and f.severity == "error"
             and f.role == "root" and f.rank is not None and f.rank_source == "message" for rank in (f.ranks or [f.rank])}
    return named.pop() if len(named) == 1 else None


def _launcher_saw_fail(finding: Finding) -> bool:
    """Whether ``finding``'s rank is a launcher's word on which process failed: torchelastic's
    summary of the first failure, or an error of a process the launcher's record names
    (torch.multiprocessing.spawn's "-- Process N terminated with the following error:"); not a
    process it only stopped (its SIGTERMs to the others)."""
    if finding.rank is None:
        return False
    return finding.rank_source == "summary" or (finding.rank_source == "launcher" and finding.severity == "error")


# The lists of ready ranks after the first on a stall report's line (field ``ready_more``: the rest of
# the line): Horovod's operations.cc writes each stalled op as "<tensor> [ready ranks: 2, 0, 1]".
_MORE_READY = regex.compile(r"\[ready ranks: (\d+(?:, \d+)*)\]")


def _rank_list(text: str) -> set[int]:
    return {int(r) for r in text.replace(" ", "").split(",") if r.isdigit()}


def _not_ready(root: Finding, evidence: RankEvidence | None, lang: str = "en") -> Finding | None:
    """A stall report that lists the ranks that were ready (Horovod's "[ready ranks: 0, 1, 3]",
    field ``ready``) names the rank the others waited for: the lowest rank of the job missing
    from it (the job's ranks: those below the highest ready one, and those the log showed).
    Where the line lists several stalled collectives (``ready_more``), the rank whose absences
    kept the most ranks waiting (each absence weighs as many as were ready for that collective):
    a rank that took another path is the only one ready for the collective the others never
    called. None where two ranks weigh the same: the report does not say which."""
    lists = [_rank_list(str(root.fields.get("ready", "")))]
    lists += [_rank_list(found) for found in _MORE_READY.findall(str(root.fields.get("ready_more", "")))]
    lists = [ready for ready in lists if ready]
    if not lists:
        return None
    highest = max(max(ready) for ready in lists)
    known = set(range(highest + 1)) | (set(evidence.known_ranks) if evidence is not None else set())
    # The report's own lists say those ranks exist, whatever world size a line seemed to give.
    world = max(evidence.world_size, highest + 1) if evidence is not None and evidence.world_size else None
    waiting: dict[int, int] = {}
    absences: dict[int, int] = {}
    for ready in lists:
        for rank in _missing(known, ready, world):
            waiting[rank] = waiting.get(rank, 0) + len(ready)
            absences[rank] = absences.get(rank, 0) + 1
    if not waiting:
        return None
    ranked = sorted(waiting, key=lambda rank: (-waiting[rank], rank))
    suspect = ranked[0]
    texts = _texts(lang)
    if len(lists) == 1:
        reason = texts["not_ready"].format(rank=suspect, ready=root.fields["ready"])
    elif len(ranked) > 1 and waiting[ranked[1]] == waiting[suspect]:
        return None
    else:
        reason = texts["not_ready_most"].format(rank=suspect, missing=absences[suspect], ops=len(lists))
    return _suspected(root, suspect, reason, texts["waited_for"], lang)


# Fields in which a launcher names the local rank of a failed process: torchelastic's "failed
# (exitcode: N) local_rank: R", DeepSpeed's "--local_rank=R", torch.multiprocessing.spawn's
# "process R terminated".
LOCAL_RANK_FIELDS = ("local_rank", "process_index")


def launcher_record(finding: Finding) -> bool:
    """Whether ``finding`` is a launcher's record of one of its processes (it names its local rank)."""
    return any(key in finding.fields for key in LOCAL_RANK_FIELDS)


def _stopped_by_the_launcher(finding: Finding) -> bool:
    """Whether ``finding`` is a launcher's word that it stopped a process (torchrun's SIGTERM to the others)."""
    return finding.rank_source == "launcher" and finding.fields.get("signal") == "SIGTERM"


def _local_rank(findings: list[Finding], evidence: RankEvidence | None, root: Finding) -> int | None:
    """The local rank of ``root`` where it is a launcher's record of a process, else of the first
    failure a launcher reported, taken as the global rank when nothing shows a second node: no
    finding names a node and no rank the log shows is above the highest local rank the launchers
    named."""
    named = [(f, int(f.fields[k])) for f in chronological(findings) for k in LOCAL_RANK_FIELDS
             if str(f.fields.get(k, "")).isdigit()]
    if not named or any(f.node for f in findings):
        return None
    highest = max(rank for _, rank in named)
    if evidence is not None and any(rank > highest for rank in evidence.known_ranks):
        return None
    return next((rank for f, rank in named if f is root), named[0][1])


def _outlived(finding: Finding, later: list[Finding]) -> bool:
    """Whether the process that printed ``finding`` went on to print a surer root cause: an
    exception no rule names that its process survived (logged by a retry loop, handled) is not
    what ended the job. Another rank's later error is no such sign: it is a consequence; nor is a
    report of other processes (``Finding.about_others``: JAX's coordination service timing out a
    barrier the others did not reach), whoever in a log without ranks printed it."""
    return any(CONFIDENCE_ORDER[f.confidence] < CONFIDENCE_ORDER[finding.confidence] and _same_process(finding, f)
               and not f.about_others for f in later)


def _same_process(a: Finding, b: Finding) -> bool:
    """Printed by one process, as far as the log says: one rank, or one file where a rank is unknown."""
    if a.rank is not None and b.rank is not None:
        return a.rank == b.rank and a.node == b.node
    # A launcher's record of a process (its local rank) is the launcher's line, not that process's.
    if launcher_record(a) or launcher_record(b):
        return False
    return a.file == b.file


def confidence(root: Finding | None, lang: str = "en") -> tuple[Confidence | None, str]:
    """How sure ``root`` (``choose``'s answer) is as the cause, and when it is
    not ``certain``, one line on the evidence that is missing: the finding's own confidence,
    lowered where ``choose`` took it from what was left rather than from a rank's own error."""
    if root is None:
        return None, ""
    level, note = root.confidence, root.confidence_note
    if root.origin in _LAST_RESORTS:
        return level, note
    if is_timeout(root):
        inferred: tuple[Confidence, str]
        inferred = ("likely", _texts(lang)["only_lost" if lost_peer(root) else "only_timeouts"])
        return _weaker((level, note), inferred)
    if root.role != "root" or root.severity != "error":
        texts = _texts(lang)
        what = texts["launcher_report"] if root.category == "launcher" else texts["category_report"].format(category=root.category)
        return _weaker((level, note), ("weak", texts["only_report"].format(what=what)))
    return level, note


def _weaker(a: tuple[Confidence, str], b: tuple[Confidence, str]) -> tuple[Confidence, str]:
    return a if CONFIDENCE_ORDER[a[0]] > CONFIDENCE_ORDER[b[0]] else b


# ``as_requested_stop``'s words in each output language: title, remedy.
REQUESTED_STOP_TEXTS = {
    "en": ("the launcher received the stop request and stopped its workers",
           "This is the stop request that monitor forwarded to the job (see 'Stopped on request'), not a failure."),
    "zh": ("启动器收到了停止请求并停止了它的 worker",
           "这是 monitor 转发给作业的停止请求（见“按请求停止”），不是故障。"),
}


def as_requested_stop(finding: Finding, lang: str = "en") -> Finding | None:
    """The launcher reporting a stop this monitor forwarded to it (torchrun's "Received 15
    death signal") is that request arriving, not someone outside stopping the job: kept as
    information, never a root cause. The finding so worded, or None when it is no such report."""
    if finding.category != STOPPED or finding.severity == "info":
        return None
    title, remedy = REQUESTED_STOP_TEXTS.get(lang, REQUESTED_STOP_TEXTS["en"])
    return replace(finding, severity="info", title=title, remedy=remedy)
