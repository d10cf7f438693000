"""The finding that names a slow rank (a warning: the job runs, slower than it could)."""

from __future__ import annotations

from monitor.diagnosis.advice import advice
from monitor.model import Category, Finding
from monitor.straggler.model import RankGpu, Scores, SlowRank

RULE = "straggler"
# Words for the clock-event reasons that slow a GPU (``metrics.gpu.THROTTLE_REASONS``).
REASON_WORDS = {
    "sw_power_cap": "power cap", "hw_slowdown": "hardware slowdown", "sw_thermal_slowdown": "thermal",
    "hw_thermal_slowdown": "thermal", "hw_power_brake_slowdown": "power brake",
}


def slow_rank_finding(scores: Scores, slow: SlowRank, pid: int | None = None) -> Finding:
    """The finding of ``slow`` as ``scores`` measured it; ``pid``: the slow rank's process."""
    fields = {"rank": str(slow.rank), "waiters": ranks_words(slow.waiters), "wait_share": f"{slow.wait_share:.3f}", "own_wait": f"{slow.own_wait:.3f}",
              "others_wait": f"{slow.others_wait:.3f}", "z": f"{min(slow.z, 99.0):.1f}", "looks": str(scores.rounds),
              "window_s": f"{scores.window_s:.0f}"}
    if slow.step_s is not None:
        fields["step_s"] = f"{slow.step_s:.3f}"
    if slow.gpu is not None and slow.gpu.sm_clock_mhz is not None:
        fields["sm_clock_mhz"] = str(slow.gpu.sm_clock_mhz)
    words = {"rank": str(slow.rank), "share": percent(slow.wait_share), "gpu": gpu_words(slow.gpu)}
    title = (advice("title-straggler-one", waiter=ranks_words(slow.waiters), **words) if len(slow.waiters) == 1
             else advice("title-straggler", waiters=ranks_words(slow.waiters), **words))
    step = advice("straggler-step", seconds=f"{slow.step_s:.2f} s") if slow.step_s is not None else ""
    remedy = advice("straggler", looks=str(scores.rounds), window=f"{scores.window_s:.0f} s", rank=str(slow.rank),
                    own=percent(slow.own_wait), waiters=ranks_words(slow.waiters), others=percent(slow.others_wait),
                    step=step, pid=str(pid) if pid is not None else "PID")
    evidence = [_evidence(score) for score in scores.ranks]
    return Finding(rule=RULE, category=Category.STRAGGLER, severity="warning", role="root", title=title,
                   origin="straggler", rank=slow.rank, ranks=[slow.rank], evidence=evidence, fields=fields,
                   remedy=remedy, first_seen=scores.taken, source_key=f"{RULE}:{slow.rank}")


def _evidence(score) -> str:
    parts = [f"rank {score.rank}: in a collective {percent(score.wait_fraction)} of {score.looks} looks"]
    if score.step_s is not None:
        parts.append(f"step {score.step_s:.2f} s")
    if score.gpu is not None:
        parts.append(_gpu_state(score.gpu))
    return ", ".join(parts)


def _gpu_state(gpu: RankGpu) -> str:
    clock = f" at {gpu.sm_clock_mhz:,} MHz" if gpu.sm_clock_mhz is not None else ""
    busy = f", {gpu.utilization_percent:.0f} % busy" if gpu.utilization_percent is not None else ""
    reasons = f" ({', '.join(gpu.throttle_reasons)})" if gpu.throttle_reasons else ""
    return f"{gpu.gpu}{clock}{busy}{reasons}"


def percent(share: float | None) -> str:
    return "?" if share is None else f"{100 * share:.0f} %"


def gpu_words(gpu: RankGpu | None) -> str:
    """"; its GPU is at 1,110 MHz (power cap)", or "" when its clock is not known."""
    if gpu is None or gpu.sm_clock_mhz is None:
        return ""
    reasons = ", ".join(dict.fromkeys(REASON_WORDS.get(r, r) for r in gpu.throttle_reasons))
    return advice("straggler-gpu", clock=f"{gpu.sm_clock_mhz:,} MHz", reasons=f" ({reasons})" if reasons else "")


def ranks_words(ranks: tuple[int, ...] | list[int]) -> str:
    """"rank 3", "ranks 0-4,6,7": runs of three or more written as ranges (a job of 64 ranks)."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end - start >= 2:
            parts.append(f"{ordered[start]}-{ordered[end]}")
        else:
            parts.extend(str(r) for r in ordered[start:end + 1])
        start = end + 1
    return ("rank " if len(ordered) == 1 else "ranks ") + ",".join(parts)


def summary(scores: Scores) -> str:
    """One line of the scores for the end of a run ("" when fewer than two ranks were seen twice:
    a rank alone is slower than no other)."""
    ranks = [r for r in scores.ranks if r.wait_fraction is not None and r.looks > 1]
    if len(ranks) < 2:
        return ""
    each = ", ".join(f"rank {r.rank} {percent(r.wait_fraction)}" for r in ranks)
    named = f"; rank {scores.slow.rank} is slow" if scores.slow is not None else "; no rank is slower than the others"
    return f"straggler scores (in a collective, last {scores.rounds} looks over {scores.window_s:.0f} s): {each}{named}"
