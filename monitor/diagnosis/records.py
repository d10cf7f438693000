"""Grouping one stream's lines into records: a whole traceback, C++ exception block or summary.

Ranks interleave their lines, so records are built per stream (file + rank, or file + pid).
A record starts on a *starter* line and takes the following lines of its stream while they
continue it; the first line that does not continue it completes it (that line is then looked
at on its own). Lines that are not part of a multi-line record are records of one line.

Continuation, by kind:

- ``traceback``: Python's ``Traceback (most recent call last):`` (or, where it was lost, a first
  ``  File "...", line N, in f`` frame), indented frame and code
  lines, the exception line, then the exception message's further lines (a CUDA error's
  hints, NCCL's ``Last error:``, a C++ ``Exception raised from``/``frame #N`` block), blank
  lines followed by ``During handling of the above exception...`` / ``The above exception was
  the direct cause...`` and the next traceback of the chain.
- ``cpp``: ``terminate called after throwing an instance of ...`` or ``Exception raised from
  ... (most recent call first):`` followed by ``what():``, ``frame #N:`` and
  ``<omitting python frames>`` lines.
- ``summary``: torchelastic's ``ChildFailedError`` block, up to its closing ``====`` line after
  the ``Root Cause`` section.
- ``headed``: a header and the line after it, which it announces: NCCL's ``Last error:``, XLA's
  ``The following tasks are unhealthy (stopped sending heartbeats):`` before the first task's name.

A record is also complete when its stream has been silent ``SILENCE_LINES`` lines of its file
(``MESSAGE_SILENCE_LINES`` after a traceback's exception line): the rank died after printing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import regex

from monitor.formats import MESSAGE_START, NOTEBOOK_HEADER
from monitor.model import LogLine

# The line torch's flight recorder puts before the stack of a collective that timed out.
COLLECTIVE_STACK = "Stack trace of the failed collective:"
# What a library prints before the traceback of an error it handled: torch._dynamo's suppressed
# compile error (torch/_dynamo/exc.py, format_error_msg: "WON'T CONVERT {name} {file} line {n} \ndue
# to: \n{traceback}"; verbose: "========== TorchDynamo Stack Trace =========="); the frame then
# runs uncompiled and the job goes on. CPython's "Error in sys.excepthook:" (Python/pythonrun.c,
# _PyErr_PrintEx): the program's own hook raised while it reported an uncaught exception, which
# Python prints next after "Original exception was:", the failure that stopped the process. A
# traceback whose header comes within HANDLED_WITHIN lines after one, in its stream, was handled;
# each intro names how (``classify``'s finding for it).
HANDLED_INTROS = {"WON'T CONVERT": "handled", "Error in sys.excepthook:": "in-excepthook",
                  # CPython before 3.10 (Modules/atexitmodule.c): an atexit callback raised after the
                  # program ended; the traceback is printed and the exit status stays (later:
                  # "Exception ignored in atexit callback", IGNORED_HEADER).
                  "Error in atexit._run_exitfuncs:": "ignored",
                  # tenacity's before_sleep_log(..., exc_info=True): f"Retrying {fn_name} in {sleep}
                  # seconds as it raised {value}." and then the traceback of the attempt it retries.
                  "seconds as it raised": "retried",
                  # logging.Handler.handleError (Lib/logging/__init__.py): "--- Logging error ---", the
                  # traceback, "Call stack:" and the record's "Message: %r" / "Arguments: %s"; emit returns.
                  "--- Logging error ---": "logged",
                  # threading.excepthook (Lib/threading.py): "Exception in thread {name}:" then the
                  # traceback. The thread died, not its process: no went-on, but no process's end.
                  "Exception in thread ": "thread"}
# The intro as threading writes it, whole (a logger's "Exception in thread pool ..." text is none).
THREAD_INTRO = regex.compile(r"^Exception in thread (?P<thread>.+?)(?: \(most likely raised during interpreter shutdown\))?:\s*$")


def intro_of(body: str) -> str | None:
    """The HANDLED_INTROS key ``body`` says, if any (the thread's only as threading writes it)."""
    said = next((intro for intro in HANDLED_INTROS if intro in body), None)
    if said is not None and HANDLED_INTROS[said] == "thread" and THREAD_INTRO.match(body.strip()) is None:
        return None
    return said
# What the process did with a traceback an intro announced, where it went on: what a rule reads in it
# happened, but did not stop the process (``classify.RuleClassifier``).
WENT_ON_FROM = frozenset({"handled", "retried", "logged"})
# torch's excepthook (torch/distributed/distributed_c10d.py, _distributed_excepthook, installed by
# init_process_group since 2.2): every line of an uncaught exception's report as "[rank<N>]: <line>".
TORCH_EXCEPTHOOK_HEADER = regex.compile(r"\[rank\d+\]: Traceback \(most recent call last\):\s*$")
# Literal text of every starter line, for the prefilter: a line without any cannot start a record.
STARTER_LITERALS = (
    "Traceback (most recent call last)",
    "Exception ignored in",
    "terminate called after throwing",
    "Exception raised from",
    "ChildFailedError",
    " FAILED",  # the summary's title (``_SUMMARY_TITLE``)
    "Last error:",
    "stopped sending heartbeats):",  # ``HEARTBEATS_HEADER``
    'File "',
    "terminated with the following error",
    " Error Snippet]:",  # Ray Train's ``SPAWNED``
    # An exception's last line standing alone (``pyexc.parse_exception_line``).
    "rror: ",
    "xception: ",
    # What a library prints before a traceback it logged and went on from.
    *HANDLED_INTROS,
    COLLECTIVE_STACK,
)
HANDLED_WITHIN = 3
# Silence (in lines of the file) after which a record is complete, and the longest record.
SILENCE_LINES = 200
# After the exception line, the rest of a message follows at once: a shorter wait.
MESSAGE_SILENCE_LINES = 50
MAX_RECORD_LINES = 400
# A record over MAX_RECORD_LINES keeps its first HEAD_LINES lines and its newest lines, and drops
# frame lines from between them: a RecursionError's 1000 frames, or a chain of long tracebacks,
# must not push out the exception lines. What cannot be dropped (messages) ends it at twice the cap.
HEAD_LINES = 100
TAIL_LINES = 100
# Lines of an exception message after the exception line (CUDA error hints, NCCL details).
MAX_MESSAGE_LINES = 40
# A traceback's states, after its exception line, in which a stamped line (``continues``) ends it
# (among its frames, a stamped line is another thread's, and the frames go on after it).
_ENDED_BY_A_NEW_ENTRY = frozenset({"message", "blank", "empty_gap", "chain"})
# TensorFlow 1.x's OpError as a session prints it: "Caused by op '...', defined at:", the frames
# where the op was built, a blank line, then "<Error> (see above for traceback): <message>" and its
# "[[Node: ...]]" lines: that line is those frames' exception line, past the blank line.
TF_SEE_ABOVE = r" \(see above for traceback\)"
TF_OP_ERROR = regex.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)" + TF_SEE_ABOVE + ": ")
# Exception lines whose message goes on past blank lines: TensorFlow 2's eager
# error raised from a tf.function ("<Error>: Graph execution error:", then what failed: "Detected at
# node ...", the op's message, its "[[{{node ...}}]]" line), and PaddlePaddle's enforce errors
# (paddle/phi/core/enforce.h, errors.h: "(<ErrorType>) " and then, after a blank line, the message:
# "MemoryError: (ResourceExhausted) " then "Out of memory error on GPU 0. ..."), and MindSpore's
# "... error! The details refer to 'Ascend Error Message'." before CANN's error under that heading,
# TorchInductor's CppCompileError (torch/_inductor/exc.py): "C++ compile error", then blank-line
# separated "Command:" and "Output:" blocks, the compiler's own error in the last; and torch.load's
# weights_only failure (serialization.py _get_wo_message), whose "WeightsUnpickler error: " line is
# followed, after a blank line, by the unpickler's own error.
TF_GRAPH_ERROR = "Graph execution error:"
# Under it, TensorFlow's StatusGroup::as_summary_status (tensorflow/tsl/platform/status.cc) lists each
# root error as "  (N) " error_name(code) ": " message (TF 1.x: the code in words, "Invalid argument").
TF_ROOT_ERROR = regex.compile(r"^\s*\(\d+\) (?P<error>[A-Za-z][A-Za-z_ ]*: +\S.*)")
_MESSAGE_AFTER_BLANK = regex.compile(
    r"(?:" + regex.escape(TF_GRAPH_ERROR) + r"|: \((?:InvalidArgument|NotFound|OutOfRange"
    r"|AlreadyExists|ResourceExhausted|PreconditionNotMet|PermissionDenied|ExecutionTimeout|Unimplemented"
    r"|Unavailable|Fatal|External)\)|The details refer to 'Ascend Error Message'\.|CppCompileError: C\+\+ compile error"
    r"|WeightsUnpickler error:)\s*$")

# An exception line with nothing after its colon: CPython writes an empty message bare ("KeyError"),
# so "<Type>: " alone is a message that starts with a newline. PaddlePaddle's (paddle/phi/core/
# enforce.h) goes on after blank lines with a ruler and its C++ stack, "Error Message Summary:" and the
# error itself; that block is the message, anything else after the blank line is not.
_EMPTY_MESSAGE = regex.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*:\s*$")
# Paddle's C++ stack (paddle/phi/core/enforce.h, GetCurrentTraceBackString): inside that message, no
# Python traceback of its own.
CPP_TRACEBACK = "C++ Traceback (most recent call last)"
# The heading of the error itself at the end of that block (pyexc reads the exception under it).
PADDLE_SUMMARY = "Error Message Summary:"
_PADDLE_BLOCK = regex.compile(r"^(?:-{20,}|" + regex.escape(CPP_TRACEBACK) + r":|" + regex.escape(PADDLE_SUMMARY) + r")$")

TRACEBACK_HEADER = "Traceback (most recent call last):"
# torch.distributed.checkpoint's CheckpointException (torch/distributed/checkpoint/api.py, _wrap_exception:
# "Traceback (most recent call last): (RANK {rank})\n" and that rank's frames): each failed rank's
# traceback, printed by every rank it was gathered to; the failure is the named rank's.
REPORTED_RANK = regex.compile(r"^Traceback \(most recent call last\): \(RANK (\d+)\)")
# torch/_utils.py, ExceptionWrapper.reraise: "Caught {exc} in DataLoader worker process N.", then
# "Original Traceback (most recent call last):" and the worker's frames.
ORIGINAL_TRACEBACK = "Original Traceback (most recent call last)"
# CPython's PyErr_WriteUnraisable ("Exception ignored in: %R"): the traceback that follows is of an
# exception Python printed and went on from (in a finalizer, a __del__, a callback).
IGNORED_HEADER = "Exception ignored in"
# Python's line between two tracebacks of a chain (traceback.py's _context_message, _cause_message).
CHAIN_LINES = ("During handling of the above exception", "The above exception was the direct cause")
# rich's traceback (rich/traceback.py, Traceback.__rich_console__, as `rich.traceback.install()`
# prints it: llm-foundry's train.py, `accelerate launch --debug`): each stack in a panel titled
# "Traceback (most recent call last)", its lines inside the panel's border, the exception line below.
RICH_BORDER = ("│", "╭", "╰")
# IPython's traceback (IPython/core/ultratb.py: Jupyter, Colab, Kaggle): under "<Type>   Traceback (most
# recent call last)", each frame unindented with blank lines between, "Cell In[3], line 5" or "File
# /path.py:41, in f(...)" (IPython 8), "<ipython-input-3-...> in <module>" or "/path.py in f(...)"
# (7), its numbered source lines with "---> 41" at the one that ran; a blank line before the
# exception line.
# IPython 8.0-8.5 wrote a cell's frame "Input In [1], in <cell line: 2>()"; a module's frame in 8 has
# no ", in" ("File ~/pkg/__init__.py:3"); 7 names Cython's .pyx/.pxi frames too.
NOTEBOOK_FRAME = regex.compile(
    r"^(?:File (?P<file>\S.*?):(?P<line>\d+)(?:, in (?P<func>[^\s(]+)|\s*$)"
    r"|(?P<file>Cell In\[\d+\]), line (?P<line>\d+)(?:, in (?P<func>[^\s(]+))?"
    r"|(?P<file>Input In \[\d+\]), in (?:<cell line: (?P<line>\d+)>|(?P<func>[^\s(]+))"
    r"|(?P<file><ipython-input-[^>\s]+>|(?>\S+)(?<=\.py|\.pyx|\.pxi)) in (?P<func><cell line: \d+>|[^\s(]+))")
# IPython's arrow at the source line that ran ("---> 41     out = model(x)"; "----> 2 ..." in 7.x).
NOTEBOOK_ARROW = regex.compile(r"^-+> ?(?P<line>\d+) ")
_NOTEBOOK_HEADER = regex.compile(rf"^{NOTEBOOK_HEADER}\s*$")
_DOTTED_NAME = regex.compile(r"[A-Za-z_][\w.]*")
# Blank lines a notebook traceback puts in a row (between frames, before the exception line).
_NOTEBOOK_BLANKS = 2
_CPP_START = regex.compile(r"^(?:terminate called after throwing an instance of|Exception raised from .* \(most recent call first\):)")
_CPP_CONT = regex.compile(r"^(?:\s*what\(\):|\s*frame #\d+:|\s*<omitting python frames>|Exception raised from )")
# torch's flight recorder, when a collective timed out (ProcessGroupNCCL.cpp, printTraceback):
# LOG(ERROR) << "Stack trace of the failed collective: \n" << the Python stack it recorded when the
# collective was called, a frame a line (FlightRecorder.cpp, Entry::getTraceback: "#" idx " "
# funcname " from " filename ":" lineno), innermost first.
_COLLECTIVE_FRAME = regex.compile(r"^#\d+ \S+ from .*:\d+\s*$")
_RULER = regex.compile(r"^\s*={10,}\s*$")
# XLA's coordination service (coordination_service.cc, CheckHeartbeatTimeout): "The following tasks
# are unhealthy (stopped sending heartbeats):\n<task names>", the end of a glog FATAL line (client.h)
# or of an exception's message; the first task's name is on the next line.
HEARTBEATS_HEADER = "The following tasks are unhealthy (stopped sending heartbeats):"
# torchelastic's summary (torch/distributed/elastic/multiprocessing/errors/__init__.py,
# _MSG_FORMAT_TEMPLATE): its title, f"{name} FAILED", under the top ruler, where a paste that starts
# at the ruler begins it without the ChildFailedError line; and what its block holds after that
# title: rulers, "Failures:", "Root Cause (first observed failure):", "[idx]:" and the entries'
# indented "key : value" lines (a traceback's lines indented under them).
_SUMMARY_TITLE = regex.compile(r"^\S+ FAILED\s*$")
_SUMMARY_LINE = regex.compile(r"^(?:\s|[=-]{10,}|Failures:|Root Cause|\[\d+\]:)")
_SECTION_RULER = regex.compile(r"^-{10,}\s*$")
# torchelastic's summary of a failed rank (``_format_failure`` in torch/distributed/elastic/
# multiprocessing/errors): "  rank      : 5 (local_rank: 1)" (before torch 1.10 without the local
# rank) and, where the entry point was
# decorated with @record, "  traceback : " + the rank's traceback with each line after the first
# indented by two more spaces.
ENTRY_RANK = regex.compile(r"^\s*rank\s*:\s*(\d+)(?: \(local_rank: (\d+)\))?")
_ENTRY_TRACEBACK = regex.compile(r"^\s*traceback : (?:Traceback \(most recent call last\):)?\s*$")
# torch.multiprocessing.spawn (ProcessRaisedException): "-- Process {index} terminated with the
# following error:" before the child's traceback; Ray Train's WorkerGroupError (ray/train/v2,
# WorkerGroupPollStatus.get_error_string: "[Rank {ranks} Error Snippet]:\n{error}", ranks joined
# by commas where several raised the same): one rank's, before its traceback.
SPAWNED = regex.compile(r"^(?:-- Process (\d+) terminated with the following error:|\[Rank (\d+) Error Snippet\]:)$")


def spawned_rank(stripped: str) -> tuple[int, str]:
    """The rank a ``SPAWNED`` line names, and what named it (a ``Record.rank_from``): the launcher
    that saw that process fail (mp.spawn's join), or a report of the worker's error among others'
    (Ray's snippets: each rank's error, a consequence's too, is one)."""
    match = SPAWNED.match(stripped)
    assert match is not None
    return (int(match[1]), "launcher") if match[1] is not None else (int(match[2]), "message")


# A frame of CPython's traceback (``traceback.StackSummary.format``: '  File "{}", line {}, in {}'):
# where a paste or an interleaved stream lost the ``Traceback`` header, the first frame starts the
# record. faulthandler's frames ('line {} in {}', no comma) are no traceback of an exception.
_FRAME_START = regex.compile(r'^\s+File "[^"]+", line \d+, in ')
# Lines that are a new log message, not part of an exception's text (glog, timestamps, logging
# levels, NCCL's ``host:pid:tid [dev] NCCL``): ``formats.toml``, ``[[message_start]]``.


@dataclass(slots=True)
class Record:
    kind: str  # traceback | cpp | summary | headed | line
    lines: list[LogLine]
    bodies: list[str]  # each line's text without its rank prefix
    rank: int | None
    # traceback state: frames (inside the frame list), message (after the exception line),
    # blank (after a blank line: only a chain marker continues), chain (after a chain marker).
    state: str = "frames"
    message_lines: int = 0
    seen_root_cause: bool = False
    # Per line: indexes of the rules whose prefilter literals occur in it.
    rule_hits: list[set[int]] = field(default_factory=list)
    # How many lines the engine had been fed before the record's first line (Finding.arrival).
    arrival: int = 0
    # The first time written in its file after the record started (``Finding.before``).
    time_after: float | None = None
    # What gave it its rank when not its lines (``engine``: "launcher", mp.spawn's process index).
    rank_from: str = ""
    # The line of its stream that completed it (not part of it), when one did: what the process
    # printed next (a retry loop's "retrying in 2 s").
    followed_by: str = ""
    # The intro (a key of HANDLED_INTROS) that said this traceback was handled, if any, and its line.
    handled_by: str = ""
    intro: str = ""
    # A notebook's traceback: the exception type its IPython header names ("" for any other
    # traceback), whose frames are unindented with blank lines between them; and the blank lines
    # seen in a row.
    notebook_type: str = ""
    notebook_blanks: int = 0
    # The exception's message goes on past blank lines (``_MESSAGE_AFTER_BLANK``), or only into a
    # PaddlePaddle block after them (``_EMPTY_MESSAGE``); frame lines are part of it (TensorFlow's).
    message_after_blank: bool = False
    message_empty: bool = False
    frames_in_message: bool = False
    # Its last line had a time or a logger's head before the program's text (``Prefix.lead``): a
    # wrapper that stamps every line, or a logger's first line of a traceback it logs. After an
    # unstamped line, a stamped one is a new log entry.
    stamped: bool = False

    @property
    def last_line(self) -> int:
        return self.lines[-1].line

    @property
    def silence_limit(self) -> int:
        return MESSAGE_SILENCE_LINES if self.state in ("message", "blank", "empty_gap", "frames_blank", "done") else SILENCE_LINES


def is_traceback_header(stripped: str) -> bool:
    """Whether a line (without its leading space) heads a traceback: Python's, rich's panel, or
    IPython's "<Type>   Traceback (most recent call last)"."""
    return stripped.startswith(TRACEBACK_HEADER) or (
        stripped.startswith("╭") and "Traceback (most recent call last)" in stripped) or (
        _NOTEBOOK_HEADER.match(stripped) is not None)


def starter_kind(body: str) -> str | None:
    """The kind of multi-line record ``body`` starts, or None."""
    stripped = body.lstrip()
    if stripped.startswith(IGNORED_HEADER) or is_traceback_header(stripped) or _FRAME_START.match(body):
        return "traceback"
    if _CPP_START.match(stripped):
        return "cpp"
    if stripped.rstrip().endswith(COLLECTIVE_STACK):
        return "collective_stack"
    if "ChildFailedError" in body and body.rstrip().endswith(("ChildFailedError:", "ChildFailedError")) \
            or _SUMMARY_TITLE.match(stripped):
        return "summary"
    if stripped.rstrip() == "Last error:" or stripped.rstrip().endswith(HEARTBEATS_HEADER):
        return "headed"
    if SPAWNED.match(stripped):
        return "spawned"  # no record: it names the process of the traceback that follows
    return None


def start(kind: str, line: LogLine, body: str, rank: int | None, arrival: int = 0, stamped: bool = False) -> Record:
    record = Record(kind, [line], [body], rank, arrival=arrival, stamped=stamped)
    if kind == "summary":
        record.state = "summary"
    elif (notebook := _NOTEBOOK_HEADER.match(body.strip())) is not None:
        record.notebook_type = notebook["type"]
    return record


def continues(record: Record, body: str, stamped: bool = False) -> bool:
    """Whether ``body`` (the next line of the record's stream; ``stamped``: a time or a logger's
    head came before it) belongs to ``record``; if it does, the caller appends it (``append``).
    Updates the record's parsing state."""
    if len(record.lines) >= 2 * MAX_RECORD_LINES:
        return False
    if stamped and not record.stamped and record.state in _ENDED_BY_A_NEW_ENTRY:
        # A logger's line after an unstamped traceback (torchelastic's "[<time>] ...: [ERROR]
        # failed" under the worker's own exception): the next message, not more of this one.
        return False
    record.stamped = stamped
    kind = record.kind
    if kind == "headed":
        return len(record.lines) == 1
    if kind == "cpp":
        return bool(_CPP_CONT.match(body))
    if kind == "collective_stack":
        return bool(_COLLECTIVE_FRAME.match(body))
    if kind == "summary":
        return _continues_summary(record, body)
    return _continues_traceback(record, body)


def append(record: Record, line: LogLine, body: str, rule_hits: set[int]) -> None:
    """Adds a line that continues ``record``, holding at most MAX_RECORD_LINES lines while it
    can: past that, the oldest indented frame line after the head is dropped (never an
    exception or message line)."""
    record.lines.append(line)
    record.bodies.append(body)
    record.rule_hits.append(rule_hits)
    if len(record.lines) <= MAX_RECORD_LINES:
        return
    for index in range(HEAD_LINES, len(record.lines) - TAIL_LINES):
        if record.bodies[index][:1] in (" ", "\t"):
            del record.lines[index], record.bodies[index], record.rule_hits[index]
            return


def _continues_summary(record: Record, body: str) -> bool:
    if record.state == "done":
        return False
    if _SUMMARY_TITLE.match(record.bodies[0].lstrip()) and not (
            _SECTION_RULER.match(body) if len(record.lines) == 1 else _SUMMARY_LINE.match(body)):
        # Begun at a title alone: the summary's section ruler comes next ("BUILD FAILED" then
        # anything else is some other program's), and only the summary's own lines belong to it.
        return False
    if "Root Cause" in body:
        record.seen_root_cause = True
    elif record.seen_root_cause and _RULER.match(body):
        record.state = "done"  # this closing ruler is the block's last line
    return True


def _continues_traceback(record: Record, body: str) -> bool:
    state = record.state
    stripped = body.strip()
    if state == "frames":
        if body[:1] in (" ", "\t") or stripped.startswith(RICH_BORDER) or is_traceback_header(stripped):
            return True
        if record.notebook_type and (NOTEBOOK_FRAME.match(stripped) or NOTEBOOK_ARROW.match(stripped)):
            return True
        if not stripped:
            record.state = "frames_blank"  # TensorFlow's op error may follow (TF_OP_ERROR)
            record.notebook_blanks = 1
            return True
        if MESSAGE_START.match(body):
            return False
        record.state = "message"  # the exception line
        record.message_lines = 0
        _read_exception_line(record, body)
        if "ChildFailedError" in body:
            record.state = "summary"
        return True
    if state == "summary":
        return _continues_summary(record, body)
    if state == "message":
        if not stripped:
            record.state = "message" if record.message_after_blank else "empty_gap" if record.message_empty else "blank"
            return True
        if stripped.startswith(CHAIN_LINES):
            record.state = "chain"  # a message that went on past its blank line ends at the chain's line
            return True
        if stripped.startswith(ORIGINAL_TRACEBACK):
            record.state = "frames"  # a DataLoader worker's own traceback, re-raised in the main process
            return True
        # TensorFlow 2.9+ lists the failed op's creation stack inside the message ("Detected at node ...
        # defined at (most recent call last):" and its frames), before "Node: '...'" and the op's error.
        new_frames = starter_kind(body) in ("traceback", "summary", "spawned") and not (
            record.frames_in_message and _FRAME_START.match(body))
        if (
            new_frames
            or record.message_lines >= MAX_MESSAGE_LINES
            or MESSAGE_START.match(body)
            # A library's line about the next traceback (a hook that printed this one itself, then failed).
            or stripped.startswith(tuple(HANDLED_INTROS))
        ):
            return False
        # A line of the message can announce more after a blank line too (torch.load's "Weights only load
        # failed." message ends a line with "WeightsUnpickler error: ", the unpickler's error after a blank).
        record.message_after_blank = record.message_after_blank or _MESSAGE_AFTER_BLANK.search(body) is not None
        record.message_lines += 1
        return True
    if state == "frames_blank":
        if record.notebook_type and (NOTEBOOK_FRAME.match(stripped) or NOTEBOOK_ARROW.match(stripped)):
            record.state = "frames"
            return True
        if TF_OP_ERROR.match(stripped) or record.notebook_type and _is_notebook_exception(record, stripped):
            record.state = "message"
            record.message_lines = 0
            _read_exception_line(record, body)
            return True
        if record.notebook_type and not stripped and record.notebook_blanks < _NOTEBOOK_BLANKS:
            record.notebook_blanks += 1
            return True
        return False
    if state == "empty_gap":
        if not stripped:
            return True
        if _PADDLE_BLOCK.match(stripped):
            record.state, record.message_after_blank = "message", True
            return True
        return False
    if state == "blank":
        if stripped.startswith(CHAIN_LINES):
            record.state = "chain"
            return True
        return False
    if state == "chain":
        if not stripped:
            return True
        if is_traceback_header(stripped):
            record.state = "frames"
            return True
        return False
    return False


def _read_exception_line(record: Record, body: str) -> None:
    """What the exception line says of the message after it (``_MESSAGE_AFTER_BLANK``,
    ``_EMPTY_MESSAGE``; TensorFlow's ``TF_GRAPH_ERROR`` lists the failed op's creation stack, whose
    frame lines are part of the message)."""
    record.message_after_blank = _MESSAGE_AFTER_BLANK.search(body) is not None
    record.message_empty = _EMPTY_MESSAGE.match(body) is not None
    record.frames_in_message = body.rstrip().endswith(TF_GRAPH_ERROR)


def _is_notebook_exception(record: Record, stripped: str) -> bool:
    """Whether ``stripped`` is the exception line of the notebook traceback ``record``: the type
    its header named, with or without its module."""
    name = stripped.split(":", 1)[0]
    return (name == record.notebook_type or name.endswith("." + record.notebook_type)) and \
        _DOTTED_NAME.fullmatch(name) is not None


def is_ignored(record: Record) -> bool:
    """Whether ``record`` is an exception Python printed and went on ("Exception ignored in")."""
    return record.bodies[0].lstrip().startswith(IGNORED_HEADER)


def embedded_traceback(record: Record) -> Record | None:
    """The traceback torchelastic's summary carries for its root cause (from the rank's error
    file), as a traceback record of that rank; None where the summary has none."""
    if not record.seen_root_cause:
        return None
    root = next(i for i, body in enumerate(record.bodies) if "Root Cause" in body)
    rank = start = None
    for index in range(root, len(record.bodies)):
        body = record.bodies[index]
        if rank is None and (match := ENTRY_RANK.match(body)):
            rank = int(match[1])
        elif _ENTRY_TRACEBACK.match(body):
            if TRACEBACK_HEADER in body:
                start = index
            elif index + 1 < len(record.bodies) and record.bodies[index + 1].strip() == TRACEBACK_HEADER:
                start = index + 1  # the assembler put the header on a line of its own
            break
    if start is None:
        return None
    end = len(record.bodies)
    while end > start + 1 and (_RULER.match(record.bodies[end - 1]) or not record.bodies[end - 1].strip()):
        end -= 1
    bodies = [TRACEBACK_HEADER, *(b[2:] if b.startswith("  ") else b for b in record.bodies[start + 1:end])]
    return Record("traceback", record.lines[start:end], bodies, rank, state="done", arrival=record.arrival,
                  rule_hits=record.rule_hits[start:end], time_after=record.time_after,
                  rank_from="summary" if rank is not None else "")


def trim(record: Record) -> Record:
    """Drops trailing blank lines (a blank line only continues a record if a chain follows)."""
    while len(record.lines) > 1 and not record.bodies[-1].strip():
        record.lines.pop()
        record.bodies.pop()
        record.rule_hits.pop()
    return record

