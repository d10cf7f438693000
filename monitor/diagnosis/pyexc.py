"""The built-in classifier for uncaught Python exceptions that no rule names.

From a traceback record it reads the final exception (the last of a chain), its message and
the user's frame: the last frame that is not inside site-packages, torch or the standard
library, which is where a fix usually goes.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from monitor.diagnosis.records import (CHAIN_LINES, NOTEBOOK_ARROW, NOTEBOOK_FRAME, ORIGINAL_TRACEBACK, PADDLE_SUMMARY,
                                        SPAWNED, TF_GRAPH_ERROR, TF_ROOT_ERROR, TF_SEE_ABOVE, is_traceback_header)

RULE_ID = "python-exception"
CATEGORY = "python_exception"

_FRAME = regex.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?')
# rich's frame, inside its panel's border: "│ /home/u/train.py:88 in main      │" (rich/traceback.py,
# Traceback._render_stack: filename, ":", lineno, " in ", name).
_RICH_FRAME = regex.compile(r"^│ (?P<file>[^\s│:][^│]*?):(?P<line>\d+) in (?P<func>[^\s│]+)\s*│?\s*$")
# TensorFlow 1.x's op errors put " (see above for traceback)" between the type and its message
# (records.TF_OP_ERROR).
_EXCEPTION = regex.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?:" + TF_SEE_ABOVE + r")?(?::\s?(?P<message>.*))?$")
# An exception's last line on its own (its traceback cut from the paste, drawn by rich in a box,
# or printed by a launcher): ``ValueError: ...``, ``torch.distributed.DistBackendError: ...``.
_EXCEPTION_LINE = regex.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)): (?P<message>\S.*)$")
# Without the ``Traceback`` header (a cut paste), only a name that says it is an exception counts
# as the exception line: a bare word after the frames ("Aborted") is not one.
_EXCEPTION_NAME = regex.compile(r"(?:Error|Exception|Interrupt|Exit)$")
# Python's library folder ("lib/python3.10/"), of its standard modules and its installed packages.
_PYTHON_LIB = r"lib[\\/]python\d(?:\.\d+)?[\\/]"
_LIBRARY = regex.compile(
    r"(?:^|[\\/])(?:(?:site-packages|dist-packages|torch)[\\/]|" + _PYTHON_LIB + r")|^<frozen |^<string>$"
)
# The launchers' own code, which runs before any training process does (the command line, the
# config it reads, the processes it starts): an exception raised there is the launch failing (a
# wrong argument, a config file another version wrote), not the training code.
_LAUNCHER_CODE = regex.compile(
    r"[\\/](?:(?P<accelerate>accelerate[\\/]commands[\\/])|(?P<deepspeed>deepspeed[\\/]launcher[\\/])"
    r"|(?P<horovodrun>horovod[\\/]run(?:ner)?[\\/])"
    r"|(?P<torchrun>torch[\\/]distributed[\\/](?:run|launch)\.py$|torch[\\/]distributed[\\/]launcher[\\/]))"
)
# The experiment tracker's own code (the installed wandb package): an exception that the user's code
# called into it and that rose from there is the tracker failing (its login, its server, a run it
# cannot create or sync), not the training. Not its data types (wandb.Image of a tensor of the wrong
# shape: the user's data), and not a user's own folder that happens to be named wandb.
_WANDB = r"(?:site|dist)-packages[\\/]wandb[\\/]"
_DATA_TYPES = r"(?:sdk[\\/])?data_types[\\/]"
_WANDB_CODE = regex.compile(_WANDB + "(?!" + _DATA_TYPES + ")")
# wandb's data types (wandb.Image, wandb.Table): an error there is about the data the user gave it.
_WANDB_DATA_TYPES = regex.compile(_WANDB + _DATA_TYPES)
# wandb.log's check of what it was given (wandb/sdk/wandb_run.py, Run._log: "wandb.log must be passed a
# dictionary", "Key values passed to `wandb.log` must be strings."): the user's data again.
_WANDB_MISUSE = regex.compile(r"wandb\.log must be passed a dictionary|Key values passed to `wandb\.log` must be strings")
# Python's own library (threading.py's run of a thread), not an installed package.
_STDLIB = regex.compile(r"[\\/]" + _PYTHON_LIB + r"(?!(?:site|dist)-packages[\\/])|^<frozen ")
# Exceptions that report another failure rather than being one: a peer died or timed out
# (DistBackendError from the watchdog), torchrun's summary of a child's failure, the SIGTERM
# torchrun sends the surviving ranks.
CASCADE_TYPES = {
    "DistBackendError", "ChildFailedError", "KeyboardInterrupt", "SignalException", "SystemExit",
    "BrokenPipeError",
    # torch.multiprocessing.spawn in the parent: a child raised (its own traceback follows) or died.
    "ProcessRaisedException", "ProcessExitedException",
    # torch.distributed.checkpoint (checkpoint/api.py): the failures of the ranks it names, raised on
    # every rank, each failed rank's traceback after it ("Traceback ...: (RANK N)", records.REPORTED_RANK).
    "CheckpointException",
}
# Exceptions raised from the failure they report (``raise ... from error``), whose chain holds that
# failure's own traceback just before: Ray Train's TrainingFailedError (ray/train/base_trainer.py,
# fit: raised from the result's error, the workers' RayTaskError(<type>) and its traceback).
WRAPPING_TYPES = {"TrainingFailedError"}
# Exceptions of a generic type whose message says they report another rank's failure: Horovod's
# SHUT_DOWN_ERROR (horovod/common/common.h), raised on every rank as a RuntimeError, or by
# TensorFlow as UnknownError/AbortedError, after one rank's exception.
CASCADE_MESSAGES = (
    "Horovod has been shut down. This was caused by an exception on one of the ranks",
    # Ray (ray/exceptions.py) in the driver, when the process behind an actor or a task died
    # (killed, crashed, its node lost): RayActorError/ActorDiedError's default message,
    # WorkerCrashedError's, LocalRayletDiedError's; Tune's TuneError when trials failed.
    "The actor died unexpectedly before finishing this task",
    "The worker died unexpectedly while executing this task",
    "The task's local raylet died",
    "Trials did not complete", "('Trials did not complete'",
    # Ray Train 2.x's controller and driver (ray/train/v2/api/exceptions.py, WorkerGroupError's
    # message, also logged alone as "Error: ..."): its workers' errors follow, each after
    # "[Rank N Error Snippet]:" (records.SPAWNED).
    "Training failed due to worker errors:",
    # horovodrun re-raising its workers' exit (horovod/runner/gloo_run.py, mpi_run.py, js_run.py).
    "Horovod detected that one or more processes exited with non-zero", "mpirun failed with exit code",
    "jsrun failed with exit code",
)
# PyTorch's test runner (test/run_test.py) reporting its test process's death: RuntimeError(f"{test}
# failed! Received signal: {signal_name}"), "{test} 1/2 failed!" where tests are sharded.
CHILD_SIGNAL_REPORT = regex.compile(r"\S+ (?:\d+/\d+ )?failed! Received signal: SIG\w+\s*$")
# A launcher's own code re-raising its child's exit status: the child failed, not the launch.
LAUNCHER_CASCADE_TYPES = {"CalledProcessError"}
# torch.multiprocessing.spawn's join, in the parent: whatever it raises reports a child's failure
# (ProcessRaisedException, ProcessExitedException; before torch 1.8 a bare Exception(msg) whose
# message starts on the next line, "-- Process N terminated with the following error:").
SPAWN_JOIN = regex.compile(r"torch[\\/]multiprocessing[\\/]spawn\.py$")
# ProcessExitedException's message (torch/multiprocessing/spawn.py, ProcessContext.join): "process %d
# terminated with exit code %d" / "process %d terminated with signal %s".
_SPAWN_EXITED = regex.compile(r"^process (\d+) terminated with (?:exit code|signal) ")
# Shown as warnings: stopping by signal is not in itself a failure of the program.
WARNING_TYPES = {"KeyboardInterrupt", "SignalException", "SystemExit"}

TITLE = "{exc_type} on rank {rank}"
CASCADE_TITLE = "{exc_type} on rank {rank} (a consequence)"

# What to do comes first (the headline already names the exception): at 80x24 the screen's
# detail pane shows the remedy's first lines only.
REMEDY = (
    "Raised from {frame_file}:{frame_line} in {frame_func}: start there.\n"
    "Uncaught {exc_type} on rank {rank}: {message}\n"
    # {python_thread} only for a thread's exception (threading's "Exception in thread <name>:").
    "It was raised in thread {python_thread}, which died of it while its process went on without it: where that rank "
    "then stopped (its peers timing out waiting for it), this is why: a loader or prefetch thread that dies leaves "
    "its rank waiting for what the thread no longer makes.\n"
    # {other_ranks} only when the job has several ranks: a single process has no peers to blame.
    "Errors on {other_ranks} after this one are usually its consequences (they time out or get SIGTERM)."
)
# An exception whose chained successor ("During handling of the above exception, another exception
# occurred:" / "The above exception was the direct cause of ...") is cut from the log: the last
# exception the log shows of that process (``PythonException.chained_cut``).
CHAINED_CUT_REMEDY = (
    "Raised from {frame_file}:{frame_line} in {frame_func}: start there.\n"
    "{exc_type} on rank {rank}: {message}\n"
    "While handling it the process raised another exception, whose traceback (after this one) is cut from the log.\n"
    "Errors on {other_ranks} after this one are usually its consequences (they time out or get SIGTERM)."
)
CASCADE_REMEDY = (
    "{exc_type} on rank {rank} reports another failure (a peer that died or timed out, or the "
    "launcher stopping the job): look for the earliest root cause on any rank."
)
# What a retry loop prints after the traceback it logged: urllib3's "Retrying (Retry(total=...))",
# tenacity's "Retrying ... in 2.0 seconds", huggingface_hub's "Retrying in 1s [Retry 1/5]",
# wandb's "retrying request". The exception was caught; the job went on.
RETRY_NEXT = regex.compile(r"(?i)\bretr(?:y|ying|ies)\b")
# Text about retrying that announces none: the last lines of Ray Train's TrainingFailedError
# (ray/train/base_trainer.py) tell how to configure retries ("To start a new run that will retry on
# training failures, set `train.RunConfig(failure_config=train.FailureConfig(max_failures))` ...").
RETRY_ADVICE = regex.compile(r"FailureConfig\(|max_failures")


def short_type(exc_type: str) -> str:
    """An exception's class name without its module ("torch.OutOfMemoryError": "OutOfMemoryError")."""
    return exc_type.rsplit(".", 1)[-1]


def announces_retry(line: str) -> bool:
    """Whether a line printed after an exception says the process is retrying what raised it."""
    return RETRY_NEXT.search(line) is not None and RETRY_ADVICE.search(line) is None


RETRIED_TEXTS = {
    "en": ("{exc_type} caught and retried on rank {rank}",
           "The program logged this {exc_type} and retried: it is what stopped the job only if the retries "
           "ran out (a later error says so). {message}"),
    "zh": ("rank {rank} 上的 {exc_type} 被捕获并重试了",
           "程序记录了这个 {exc_type} 并进行了重试：只有重试用尽时它才是作业停下的原因（之后会有报错说明）。{message}"),
}
# A traceback a library logged as handled (records.HANDLED_INTROS: torch._dynamo's "WON'T CONVERT").
HANDLED_TEXTS = {
    "en": ("{exc_type} handled by torch.compile on rank {rank}: the code ran uncompiled",
           "torch.compile could not compile this code, logged why and ran it eagerly "
           "(torch._dynamo.config.suppress_errors, or an error it always tolerates): the job went on, slower where "
           "the graph broke. {message}"),
    "zh": ("rank {rank} 上的 {exc_type} 已被 torch.compile 处理：代码以未编译方式运行",
           "torch.compile 无法编译这段代码，记录了原因并以 eager 方式运行（torch._dynamo.config.suppress_errors，"
           "或它总会容忍的错误）："
           "作业继续运行，只是在图断开处更慢。{message}"),
}
# Python's logging could not emit a record (records.HANDLED_INTROS: Handler.handleError's "--- Logging
# error ---"): the handler printed why and the program went on, that record lost.
LOGGED_TEXTS = {
    "en": ("{exc_type} in a logging handler on rank {rank}: a log record was not written",
           "Python's logging could not write a record (its handler printed this, then \"Call stack:\" and the "
           "message it dropped) and the program went on: what the handler writes to is failing, and the lines "
           "it drops are lost. {message}"),
    "zh": ("rank {rank} 上的日志 handler 出现 {exc_type}：一条日志记录没有写出",
           "Python 的 logging 写不出一条记录（它的 handler 打印了这个错误，接着是 \"Call stack:\" 和丢掉的消息），"
           "程序继续运行：handler 写入的目标出了问题，它丢掉的行就没了。{message}"),
}
# The program's sys.excepthook raised while it reported an uncaught exception (records.HANDLED_INTROS):
# the exception Python prints after it ("Original exception was:") is the one that stopped the process.
HOOK_TEXTS = {
    "en": ("{exc_type} in the program's sys.excepthook on rank {rank}, while it reported the real failure",
           "The program's own exception hook raised this while reporting an uncaught exception; Python then "
           "printed that exception after \"Original exception was:\", and it is what stopped the process. Fix the "
           "hook too: {message}"),
    "zh": ("rank {rank} 上程序自己的 sys.excepthook 在报告真正的失败时抛出了 {exc_type}",
           "程序自己的异常钩子在报告一个未捕获的异常时抛出了这个异常；随后 Python 在 \"Original exception was:\" "
           "之后打印了那个异常，正是它让进程停下的。也修一下这个钩子：{message}"),
}
# An exception Python printed and ignored ("Exception ignored in: ..."): it stopped nothing.
IGNORED_TEXTS = {
    "en": ("{exc_type} ignored by Python (in a finalizer or callback)",
           "Python printed this {exc_type} and went on: it was raised where nothing could catch it (a __del__, "
           "a finalizer, a callback at shutdown), so it is not what stopped the job. Fix it if it repeats: {message}"),
    "zh": ("Python 忽略了 {exc_type}（在 finalizer 或回调中）",
           "Python 打印了这个 {exc_type} 并继续运行：它是在无法被捕获的地方抛出的（__del__、finalizer、退出时的回调），"
           "所以不是它让作业停下的。如果反复出现再修：{message}"),
}
# A traceback whose exception line is not in the log: the file, the paste or the process ended
# while it was printed. Something failed there; what, the log no longer says.
CUT_TEXTS = {
    "en": ("A traceback on rank {rank}, cut before its exception",
           "The log ends inside a traceback, after its frames and before the exception it was printing: "
           "the error itself is not in what was read. Its last frame of your code: {frame_file}:{frame_line} in "
           "{frame_func}. Read the rest of this rank's output (the lines after it, a longer paste, the "
           "rank's own log file)."),
    "zh": ("rank {rank} 上的一个 traceback，在异常之前被截断",
           "日志在一个 traceback 的中间结束了：有调用栈，却没有它正在打印的异常，错误本身不在读到的内容里。"
           "它在你的代码中的最后一帧：{frame_file}:{frame_line} 的 {frame_func}。"
           "去看这个 rank 其余的输出（它后面的行、更长的粘贴、这个 rank 自己的日志文件）。"),
}
# The same where the frames are a service's own code (``PythonException.service``): it failed there.
CUT_SERVICE_TEXTS = {
    "en": ("wandb failed on rank {rank} (its traceback is cut before the exception)",
           "The log ends inside a traceback of wandb's own code ({frame_file}:{frame_line} in {frame_func}), before the "
           "exception it was printing: the experiment tracker failed, not the training.\n{service_advice}"),
    "zh": ("rank {rank} 上 wandb 失败了（它的 traceback 在异常之前被截断）",
           "日志在 wandb 自己代码的一个 traceback 中间结束了（{frame_file}:{frame_line} 的 {frame_func}），没有它正在打印的"
           "异常：失败的是实验跟踪工具，不是训练。\n{service_advice}"),
}
# An exception the launcher's own code raised (``PythonException.launcher``): the launch failed.
LAUNCHER_TEXTS = {
    "en": ("{launcher} failed before the training started: {exc_type}",
           "{launcher}'s own code raised this ({frame_file}:{frame_line} in {frame_func}) before any training "
           "process ran: the launch itself failed, not your script. {exc_type}: {message}\n"
           "Its command line or its config is the cause: {hint}"),
    "zh": ("{launcher} 在训练开始之前就失败了：{exc_type}",
           "这是 {launcher} 自己的代码抛出的（{frame_file}:{frame_line} 的 {frame_func}），那时还没有任何训练进程在运行："
           "失败的是启动本身，不是你的脚本。{exc_type}: {message}\n"
           "原因在它的命令行或配置里：{hint}"),
}
LAUNCHER_HINTS = {
    "en": {
        "accelerate": "`accelerate env` shows the config file it read; `accelerate config` writes a new one (a file "
                      "written by another version of accelerate can hold keys this one does not know, or lack ones it needs).",
        "deepspeed": "check the hostfile and the arguments given to deepspeed (its help lists them).",
        "horovodrun": "check the process count and the hosts given to horovodrun (its help lists them).",
        "torchrun": "check the node and process counts and the rendezvous arguments given to torchrun (its help lists them).",
    },
    "zh": {
        "accelerate": "`accelerate env` 显示它读取的配置文件；`accelerate config` 会写一个新的（另一个版本的 accelerate "
                      "写的文件可能有这个版本不认识的键，或缺少它需要的键）。",
        "deepspeed": "检查 hostfile 和传给 deepspeed 的参数（它的帮助里列出了这些参数）。",
        "horovodrun": "检查传给 horovodrun 的进程数和主机（它的帮助里列出了这些参数）。",
        "torchrun": "检查传给 torchrun 的节点数、进程数和 rendezvous 参数（它的帮助里列出了这些参数）。",
    },
}
# An exception of wandb's (``PythonException.service``): its title, and its remedy by what the log
# shows above it (``service_shows``): a call of the user's ("call"), only wandb's own frames, its
# raise site ("own"), no frame at all, the exception's line alone, its class wandb's ("bare"), or
# only another library's frames, its class wandb's ("through").
SERVICE_TEXTS = {
    "en": {
        "title": "wandb failed: {exc_type}",
        "call": "wandb's own code raised this under your call at {frame_file}:{frame_line} ({frame_func}): the "
                "experiment tracker failed, not the training. {exc_type}: {message}\n{service_advice}",
        "own": "wandb's own code raised this at {frame_file}:{frame_line} ({frame_func}); the log shows no call of "
               "yours above it: the experiment tracker failed, not the training. {exc_type}: {message}\n{service_advice}",
        "bare": "wandb raised its own error (the log shows its last line alone, no frame): the experiment tracker "
                "failed, not the training. {exc_type}: {message}\n{service_advice}",
        "through": "wandb raised its own error, which rose through {frame_file}:{frame_line} ({frame_func}), a "
                   "library's code; the log shows neither wandb's frames nor a call of yours: the experiment tracker "
                   "failed, not the training. {exc_type}: {message}\n{service_advice}",
    },
    "zh": {
        "title": "wandb 失败了：{exc_type}",
        "call": "这是 wandb 自己的代码在你的调用（{frame_file}:{frame_line} 的 {frame_func}）之下抛出的：失败的是实验跟踪工具，"
                "不是训练。{exc_type}: {message}\n{service_advice}",
        "own": "这是 wandb 自己的代码在 {frame_file}:{frame_line}（{frame_func}）抛出的；日志里它上面没有你的调用：失败的是实验"
               "跟踪工具，不是训练。{exc_type}: {message}\n{service_advice}",
        "bare": "这是 wandb 自己的错误（日志里只有它的最后一行，没有调用栈）：失败的是实验跟踪工具，不是训练。"
                "{exc_type}: {message}\n{service_advice}",
        "through": "这是 wandb 自己的错误，它经过了一个库的代码 {frame_file}:{frame_line}（{frame_func}）；日志里既没有 wandb "
                   "自己的帧，也没有你的调用：失败的是实验跟踪工具，不是训练。{exc_type}: {message}\n{service_advice}",
    },
}
# What to do about a service's failure ({service_advice}), by what it raised: an error of its code
# (the attribute, the import, the call it made is wrong) is no login or network problem.
# wandb's own DependencyError ("a missing or invalid dependency"), WandbCoreNotAvailableError and
# InternalError ("an SDK internal error") are its installation's or its code's too.
SERVICE_CODE_TYPES = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "NameError", "TypeError",
                                "DependencyError", "WandbCoreNotAvailableError", "InternalError"})
# wandb's own errors for a call it rejects (wandb/errors: UsageError, "Raised when an invalid usage of
# the SDK API is detected", and its kinds: InvalidError, an invalid argument; UnsupportedError;
# ConfigurationError, something misconfigured; RequireError, wandb.require() failing).
SERVICE_USAGE_TYPES = frozenset({"UsageError", "InvalidError", "UnsupportedError", "ConfigurationError", "RequireError"})
SERVICE_ADVICE = {
    "en": {
        "code": "An error of wandb's code itself, not of its login or its server: a bug, or a wandb older or newer than "
                "what calls it (`pip install -U wandb` is the first thing to try). WANDB_MODE=offline does not avoid "
                "it; WANDB_MODE=disabled turns wandb off to train meanwhile.",
        "service": "Check its login (`wandb login`, WANDB_API_KEY) and its connection to the wandb server; "
                   "WANDB_MODE=offline trains without it (`wandb sync` uploads the run later).",
        "usage": "wandb rejected how it was called: its message names the argument or the call to change (in "
                 "wandb.init, wandb.log, or the settings and WANDB_* variables they read). WANDB_MODE=disabled "
                 "turns wandb off to train meanwhile.",
    },
    "zh": {
        "code": "这是 wandb 自己代码的错误，不是登录或服务器的问题：bug，或者 wandb 的版本比调用它的代码旧或新"
                "（先试试 `pip install -U wandb`）。WANDB_MODE=offline 避不开它；WANDB_MODE=disabled 可以关掉 wandb 先训练。",
        "service": "检查它的登录（`wandb login`、WANDB_API_KEY）和到 wandb 服务器的连接；WANDB_MODE=offline 可以不依赖它训练"
                   "（之后用 `wandb sync` 上传这次运行）。",
        "usage": "wandb 拒绝了这种调用方式：它的消息指出了要改的参数或调用（在 wandb.init、wandb.log，或它们读取的设置和 "
                 "WANDB_* 环境变量里）。WANDB_MODE=disabled 可以关掉 wandb 先训练。",
    },
}
# The same in Chinese (``--lang zh``): the same fields.
TEXTS = {
    "en": (TITLE, CASCADE_TITLE, REMEDY, CASCADE_REMEDY, "the other ranks",
           "no rule names {type}: the category is read from its uncaught traceback alone",
           "only the exception's last line, with no traceback: nothing shows where it was raised or that it was not caught",
           CHAINED_CUT_REMEDY,
           "the exception raised while handling {type} is cut from the log: {type} is the last one it shows"),
    "zh": (
        "{exc_type}（rank {rank}）",
        "{exc_type}（rank {rank}，是别处失败的后果）",
        "在 {frame_file}:{frame_line} 的 {frame_func} 中抛出：从那里查起。\n"
        "未捕获的 {exc_type}（rank {rank}）：{message}\n"
        "它是在线程 {python_thread} 中抛出的，这个线程因此死了，而它的进程没有它继续运行：如果这个 rank 随后停住了"
        "（其他 rank 等它等到超时），原因就在这里：加载数据或预取的线程死掉后，它的 rank 会一直等那个线程再也不会产出的东西。\n"
        "此后{other_ranks}上的报错通常是它的后果（它们会超时或收到 SIGTERM）。",
        "{exc_type}（rank {rank}）报告的是别处的失败（对端进程死了或超时，或启动器在停止作业）："
        "去所有 rank 上找最早的根因。",
        "其他 rank ",
        "没有规则认识 {type}：类别只是从未捕获的 traceback 读出的",
        "只有异常的最后一行，没有 traceback：看不出它在哪里抛出，也看不出它没有被捕获",
        "在 {frame_file}:{frame_line} 的 {frame_func} 中抛出：从那里查起。\n"
        "{exc_type}（rank {rank}）：{message}\n"
        "处理它时进程又抛出了另一个异常，那个异常的 traceback 在日志里被截断了（就从这个异常之后开始）。\n"
        "此后{other_ranks}上的报错通常是它的后果（它们会超时或收到 SIGTERM）。",
        "处理 {type} 时抛出的异常在日志里被截断了：{type} 是日志里能看到的最后一个异常",
    ),
}


@dataclass(frozen=True, slots=True)
class PythonException:
    exc_type: str
    message: str
    frame_file: str
    frame_line: str
    frame_func: str
    # Index (in the record) of the exception line, for evidence.
    index: int
    # The launcher whose own code raised it (its frame is then the raise site), else "".
    launcher: str = ""
    # The service whose own code the user's frame called into and it rose from ("wandb"), else "";
    # with no frame of the user's shown, the frame is the service's own raise site.
    service: str = ""
    # The service whose code the traceback went through that the frames clear of it ("wandb" where
    # it failed in wandb's data types: the user's data), else "": no opinion may name it instead.
    cleared: str = ""
    # Raised by torch.multiprocessing.spawn's join in the parent (``SPAWN_JOIN``): a child's failure.
    spawn_join: bool = False
    # The exception raised while handling this one (the chain's next traceback) is cut from the
    # log after its header: this is the last exception the log shows of that process.
    chained_cut: bool = False

    @property
    def short_type(self) -> str:
        return short_type(self.exc_type)

    @property
    def is_cascade(self) -> bool:
        return (self.short_type in CASCADE_TYPES or self.message.lstrip().startswith(CASCADE_MESSAGES)
                or self.short_type == "RuntimeError" and CHILD_SIGNAL_REPORT.match(self.message.strip()) is not None
                or bool(self.launcher) and self.short_type in LAUNCHER_CASCADE_TYPES or self.spawn_join)

    def spawned_rank(self, followed_by: str) -> int | None:
        """The process torch.multiprocessing.spawn's join says failed, where this is what it raised
        (``spawn_join``): ProcessExitedException's "process N terminated with exit code/signal ...",
        or the "-- Process N terminated with the following error:" line after ProcessRaisedException
        (``followed_by``, the line that ended its record), the child's traceback after it, where the
        log still holds it. Under mp.spawn's usual use the process index is the rank."""
        if not self.spawn_join:
            return None
        named = _SPAWN_EXITED.match(self.message.strip()) or SPAWNED.match(followed_by.strip())
        return int(named[1]) if named is not None and named[1] is not None else None

    def fields(self) -> dict[str, str]:
        fields = {
            "exc_type": self.exc_type, "message": self.message, "frame_file": self.frame_file,
            "frame_line": self.frame_line, "frame_func": self.frame_func,
        }
        if self.cleared:
            fields["cleared"] = self.cleared
        return fields


def parse_exception_line(body: str) -> PythonException | None:
    """An exception's last line standing alone (no traceback around it), or None."""
    match = _EXCEPTION_LINE.match(body.strip()) if "rror: " in body or "xception: " in body else None
    if match is None:
        return None
    return PythonException(match["type"], match["message"].strip(), "", "", "", 0, service=_own_error(match["type"]))


def cut_traceback(bodies: list[str], ended_there: bool = False) -> PythonException | None:
    """A traceback with its header and frames but no exception line (``parse_traceback`` found
    none): its user frame (else its last), with no type; None for anything else. ``ended_there``:
    nothing of its stream came after it, where frames without a header may be one too when
    nothing but frames and their code follows them (the log's end)."""
    bodies = _without_group_gutter(bodies)
    header = next((i for i in range(len(bodies) - 1, -1, -1) if is_traceback_header(bodies[i].lstrip())), None)
    if header is None and not (ended_there and _frame(bodies[0]) and all(b[:1] in (" ", "\t") for b in bodies)):
        return None
    # A paste that lost the header line (its rank prefix cut off with it, so the frames are another
    # stream's) starts at its first frame; two frames at least, so one quoted frame is not a
    # traceback, and only at the end of its stream: frames its process printed and went on from
    # are a stack it logged (traceback.print_stack, logging's stack_info), no failure.
    first = 0 if header is None else header + 1
    frames = [(i, match) for i in range(first, len(bodies)) if (match := _frame(bodies[i]))]
    if not frames or (header is None and len(frames) < 2):
        return None
    shown = [(f["file"], f["line"], (f["func"] or "").strip()) for _, f in frames]
    indexes = [i for i, _ in frames]
    user = _user_frame(list(range(len(frames))), [file for file, _, _ in shown], None)
    at = len(frames) - 1 if user is None else user
    cleared = _cleared(shown, "")
    service = "" if cleared else _service(shown, ("", "", "") if user is None else shown[user])
    return PythonException("", "", *shown[at], indexes[at], service=service, cleared=cleared)


def _user_frame(items: list, files: list[str], default):
    """Of frames (oldest first, each with its file), the innermost in the user's own code, else ``default``."""
    return next((item for item, file in zip(reversed(items), reversed(files)) if not _LIBRARY.search(file)), default)


def _frame(body: str) -> regex.Match | None:
    """A frame's line, as Python, rich or IPython prints it (groups file, line, func; IPython 7's
    without a line)."""
    return _FRAME.match(body) or (_RICH_FRAME.match(body) if body.startswith("│") else NOTEBOOK_FRAME.match(body))


def _shifted_exception(stripped: str) -> bool:
    match = _EXCEPTION.match(stripped)
    return match is not None and _EXCEPTION_NAME.search(match["type"]) is not None


# An exception group's traceback (Python 3.11+, traceback.py's _ExceptionPrintContext.emit): each
# line behind a gutter of two spaces per depth and "| " ("+ " on the group's header), the
# sub-exceptions between "+-+---------------- 1 ----------------" and "+------------" rulers. Any
# number of spaces: a prefix read off the line may have taken one (torchrun --tee's "[default1]:" is
# followed by none, yet its pattern allows one for the tools that write "[worker1]: ").
_GROUP_GUTTER = regex.compile(r"^ +[|+] ")
_GROUP_RULER = regex.compile(r"^ +(?:\+-)?\+-{8,}")


def _without_group_gutter(bodies: list[str]) -> list[str]:
    """An exception group's lines as plain traceback lines (its rulers blank, so indexes stay the
    record's), or ``bodies``."""
    guttered = sum(1 for body in bodies[1:] if _GROUP_GUTTER.match(body))
    if guttered < max(2, (len(bodies) - 1) // 2):
        return bodies
    return ["" if _GROUP_RULER.match(body) else _GROUP_GUTTER.sub("", body) for body in bodies]


def _summarised(bodies: list[str], exception: tuple[str, str, int]) -> tuple[str, str, int]:
    """An exception whose message is empty on its own line: as PaddlePaddle raises its errors
    (paddle/phi/core/enforce.h: the message starts with a newline, then the C++ stack and "Error
    Message Summary:"), the summary's own exception line, where the record holds one; else, a
    message that starts with a newline (raise ValueError("\\n" + table)), its first line of text."""
    summary = next((i for i in range(exception[2] + 1, len(bodies)) if bodies[i].strip() == PADDLE_SUMMARY), None)
    if summary is None:
        first = next((body.strip() for body in bodies[exception[2] + 1:] if body.strip()), "")
        text = any(c.isalnum() for c in first) and not is_traceback_header(first) and not first.startswith(CHAIN_LINES)
        return (exception[0], first, exception[2]) if text else exception
    for index in range(summary + 1, len(bodies)):
        if (match := _EXCEPTION.match(bodies[index].strip())) is not None and match["message"]:
            return match["type"], match["message"].strip(), index
    return exception


def parse_traceback(bodies: list[str]) -> PythonException | None:
    """The final exception of a traceback record (its lines without rank prefixes); of an
    exception group, its last sub-exception's (the group only reports them)."""
    bodies = _without_group_gutter(bodies)
    frames: list[tuple[str, str, str]] = []
    exception: tuple[str, str, int] | None = None
    # The chain's exception before the current traceback (a record holds a chain's tracebacks),
    # and whether the last exception is followed by the chain's "During handling ..." line.
    context: tuple[tuple[str, str, int], list[tuple[str, str, str]]] | None = None
    chained = False
    headerless = in_frames = bool(bodies) and _FRAME.match(bodies[0]) is not None
    frame_indent = 2
    for index, body in enumerate(bodies):
        stripped = body.strip()
        if is_traceback_header(stripped):
            if exception is not None:
                context = (exception, frames)
            in_frames, frames, exception, headerless, chained = True, [], None, False, False
            continue
        if exception is not None and not in_frames and stripped.startswith(CHAIN_LINES):
            chained = True
            continue
        if stripped.startswith(ORIGINAL_TRACEBACK):
            # torch's ExceptionWrapper.reraise ("Caught KeyError in DataLoader worker process 0.
            # Original Traceback ..."): the worker's own frames and exception are the real ones.
            in_frames, frames, headerless = True, [], False
            continue
        if in_frames:
            frame = _frame(body)
            if frame:
                if not frames:
                    frame_indent = len(body) - len(body.lstrip())
                frames.append((frame["file"], frame["line"] or "", (frame["func"] or "").strip()))
                continue
            if not stripped:
                continue
            if frames and not frames[-1][1] and (arrow := NOTEBOOK_ARROW.match(stripped)):
                frames[-1] = (frames[-1][0], arrow["line"], frames[-1][2])
                continue
            if body[:1] in (" ", "\t") and (
                len(body) - len(body.lstrip()) > frame_indent - 2 or not _shifted_exception(stripped)
            ):
                # A frame's source line. A traceback shifted right as a whole (torchelastic's
                # summary indents the traceback of a rank's error file under "traceback :", a paste
                # indented as code) keeps its exception line two columns left of its frames.
                continue
            match = _EXCEPTION.match(stripped)
            if match is None:
                # Another stream's line in the middle of the frames (a progress bar redrawn with
                # \r, which a log collector wrote as "#015 86%|..."): the frames go on after it.
                continue
            in_frames = False
            if not headerless or _EXCEPTION_NAME.search(match["type"]):
                exception = (match["type"], (match["message"] or "").strip(), index)
    if exception is not None and not exception[1]:
        exception = _summarised(bodies, exception)
    # The chain's next exception is cut: after the "During handling ..." line, or right after its
    # traceback's header (cut among its frames, ``cut_traceback`` reads where it failed).
    chained_cut = chained or (exception is None and context is not None and not frames)
    if exception is not None and context is not None and short_type(exception[0]) in WRAPPING_TYPES:
        exception, frames = context  # the failure it was raised from
    if exception is None:
        if context is None or frames:
            return None
        exception, frames = context
    exc_type, message, index = exception
    if message.endswith(TF_GRAPH_ERROR):
        message = _with_root_error(bodies[index + 1:], message)
    launcher = _launcher(frames[-1][0]) if frames else ""
    if launcher:
        # No frame of the user's code to point at (the entry script is the launcher's): where it raised.
        return PythonException(exc_type, message, *frames[-1], index, launcher, chained_cut=chained_cut)
    user = _user_frame(frames, [f[0] for f in frames], ("", "", ""))
    spawn_join = bool(frames) and SPAWN_JOIN.search(frames[-1][0]) is not None
    cleared = _cleared(frames, message)
    service = "" if cleared else _service(frames, user) or _own_error(exc_type)
    if service and not user[0]:
        # No call of the user's to point at: where the service's own code raised it (or called
        # the library that did).
        user = _service_frame(frames)
    return PythonException(exc_type, message, user[0], user[1], user[2], index, service=service,
                           cleared=cleared, spawn_join=spawn_join, chained_cut=chained_cut)


def _service(frames: list[tuple[str, str, str]], user: tuple[str, str, str]) -> str:
    """"wandb" where the frame the user's innermost frame called is wandb's own code, or, with no
    frame of the user's code shown (a paste cut above wandb's frames, a thread of wandb's own
    started from Python's threading), where the outermost frame past Python's own library is;
    else "". Asked only of frames ``_cleared`` did not clear (wandb's data types: the user's data)."""
    if not user[0]:
        outer = next((frame for frame in frames if not _STDLIB.search(frame[0])), None)
        return "wandb" if outer is not None and _WANDB_CODE.search(outer[0]) else ""
    last = max((i for i, frame in enumerate(frames) if frame == user), default=len(frames))
    return "wandb" if last + 1 < len(frames) and _WANDB_CODE.search(frames[last + 1][0]) else ""


def _own_error(exc_type: str) -> str:
    """"wandb" where the exception's class is one of wandb's own (``wandb.errors.CommError``, printed
    with its module: only wandb raises those), whatever frames the log shows; else ""."""
    return "wandb" if exc_type.startswith("wandb.") else ""


def _with_root_error(bodies: list[str], message: str) -> str:
    """TensorFlow's "Graph execution error:" with the first root error of the report under it
    (StatusGroup::as_summary_status: "  (N) CODE: message"), which names the cause."""
    for body in bodies:
        if (match := TF_ROOT_ERROR.match(body)) is not None:
            return f"{message} {' '.join(match['error'].split())}"
    return message


def _cleared(frames: list[tuple[str, str, str]], message: str) -> str:
    """"wandb" where the traceback went through wandb's data types (wandb.Image, wandb.Table) or
    wandb.log refused what it was passed: the user's data failed there, not the tracker; else ""."""
    if _WANDB_MISUSE.search(message) or any(_WANDB_DATA_TYPES.search(file) for file, _, _ in frames):
        return "wandb"
    return ""


def _service_frame(frames: list[tuple[str, str, str]]) -> tuple[str, str, str]:
    """The innermost frame of the service's own code (where it raised, or called what did), else
    the last frame shown (none: a traceback of its exception line alone)."""
    return next((frame for frame in reversed(frames) if _WANDB_CODE.search(frame[0])),
                frames[-1] if frames else ("", "", ""))


def service_shows(file: str) -> str:
    """What the frame a service's exception points at is (a key of ``SERVICE_TEXTS``): none, the
    exception's line alone ("bare"); the service's own installed code ("own"); another library's
    code, wandb's own frames not shown ("through"); else the user's call ("call")."""
    if not file:
        return "bare"
    if _WANDB_CODE.search(file):
        return "own"
    return "through" if _LIBRARY.search(file) else "call"


def _launcher(file: str) -> str:
    """The launcher whose own code ``file`` is, else ""."""
    match = _LAUNCHER_CODE.search(file)
    return next((name for name, found in match.groupdict().items() if found), "") if match else ""
