"""Scoring the ranks over a window of looks, and the rule that names a slow rank.

Each look sees every rank either inside a collective (waiting: for the others, or for the
transfer itself) or elsewhere (computing, loading data). A rank the others wait for is the one
seldom seen waiting while every other rank often is. A balanced job shows the same shares on
every rank up to sampling noise: with ``n`` looks a share ``p`` wobbles by about
``sqrt(p(1 - p) / n)`` (0.1 at 20 looks and p = 0.3), so a rank is named only when

- the window holds at least ``min_looks`` looks of every rank compared,
- every other rank waits at least ``min_gap`` more often than it (a share of the time that
  matters to the job, not a rounding of a few looks),
- its share lies at least ``min_z`` standard errors below the other ranks' pooled share (a
  two-proportion z-test: the noise of the window, whatever its size and the number of ranks),
- and the same rank is pointed at by ``hold`` windows in a row (``Steadiness``): a rank slowed
  once (a checkpoint save, a burst of host load) is not named.

The thresholds were set from measurements of balanced and slowed real jobs (benchmarks/README.md,
"Straggler scores").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from monitor.straggler.model import RankGpu, RankScore, Round, Scores, SlowRank


@dataclass(frozen=True, slots=True)
class Rule:
    min_looks: int = 12
    min_gap: float = 0.2
    min_z: float = 3.0
    hold: int = 10


def score(rounds: Iterable[Round], steps: Mapping[int, float] | None = None,
          gpus: Mapping[int, RankGpu] | None = None, rule: Rule = Rule()) -> Scores:
    """Each rank's wait fraction over ``rounds`` (oldest first), with its step time (``steps``:
    rank -> seconds per step) and GPU where known; ``candidate`` is the rank this window points at."""
    rounds = list(rounds)
    steps, gpus = steps or {}, gpus or {}
    looks: dict[int, int] = {}
    waits: dict[int, int] = {}
    for one in rounds:
        for look in one.looks:
            looks[look.rank] = looks.get(look.rank, 0) + 1
            waits[look.rank] = waits.get(look.rank, 0) + look.waiting
    ranks = tuple(RankScore(rank, looks[rank], waits[rank] / looks[rank], steps.get(rank), gpus.get(rank))
                  for rank in sorted(looks))
    window = rounds[-1].taken - rounds[0].taken if rounds else 0.0
    return Scores(taken=rounds[-1].taken if rounds else 0.0, rounds=len(rounds), window_s=window, ranks=ranks,
                  candidate=_candidate(ranks, rule))


def _candidate(ranks: tuple[RankScore, ...], rule: Rule) -> SlowRank | None:
    compared = [r for r in ranks if r.looks >= rule.min_looks and r.wait_fraction is not None]
    if len(compared) < 2:
        return None
    slow = min(compared, key=lambda r: (r.wait_fraction, r.rank))
    others = [r for r in compared if r is not slow]
    nearest = min(others, key=lambda r: r.wait_fraction)  # type: ignore[arg-type,return-value]
    assert slow.wait_fraction is not None and nearest.wait_fraction is not None
    gap = nearest.wait_fraction - slow.wait_fraction
    others_looks = sum(r.looks for r in others)
    others_wait = sum(r.wait_fraction * r.looks for r in others if r.wait_fraction is not None) / others_looks
    z = _z(slow.wait_fraction, slow.looks, others_wait, others_looks)
    if gap < rule.min_gap or z < rule.min_z:
        return None
    return SlowRank(rank=slow.rank, waiters=tuple(r.rank for r in others), wait_share=others_wait - slow.wait_fraction,
                    own_wait=slow.wait_fraction, others_wait=others_wait, z=z, step_s=slow.step_s, gpu=slow.gpu)


def _z(low: float, low_looks: int, high: float, high_looks: int) -> float:
    """The gap between two shares in standard errors (a two-proportion z-test)."""
    pooled = (low * low_looks + high * high_looks) / (low_looks + high_looks)
    error = math.sqrt(pooled * (1 - pooled) * (1 / low_looks + 1 / high_looks))
    gap = high - low
    if error == 0:
        return math.inf if gap > 0 else 0.0
    return gap / error


class Steadiness:
    """Names a candidate once the same rank was pointed at by ``rule.hold`` windows in a row, and
    names nobody again once a window points at no rank or another."""

    def __init__(self, rule: Rule = Rule()) -> None:
        self.rule = rule
        self._rank: int | None = None
        self._streak = 0

    def judge(self, scores: Scores) -> Scores:
        """``scores`` with ``slow`` set when its candidate has held."""
        candidate = scores.candidate
        if candidate is None:
            self._rank, self._streak = None, 0
            return scores
        self._streak = self._streak + 1 if candidate.rank == self._rank else 1
        self._rank = candidate.rank
        return replace(scores, slow=candidate) if self._streak >= self.rule.hold else scores
