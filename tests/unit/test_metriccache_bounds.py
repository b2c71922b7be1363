"""The metric cache's memory stays bounded under pod churn: at most ``max_series`` series in memory, live series always
kept, evicted (deleted pods') series still answered from sqlite, every query the same as an unbounded cache's."""

from __future__ import annotations

import math

import pytest

from koordlet.metriccache import MetricCache, Sample, labels

T0 = 1_700_000_000.0
INF = math.inf
LIFETIME = 5              # seconds a churned pod lives
ARRIVALS = 4              # churned pods started per second: ~20 alive at a time
LONG = ("long-a", "long-b", "long-c")     # alive the whole run


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pod_samples(uid: str, n: int, t: float) -> list[Sample]:
    """What the usage collector gives for one pod with one container; values unique per (pod, second)."""
    v = n * 10_000 + (t - T0)
    return [Sample("pod_cpu_usage", labels(pod_uid=uid), t, v),
            Sample("pod_memory_usage", labels(pod_uid=uid), t, v + 0.5),
            Sample("container_cpu_usage", labels(container_id=f"c-{uid}", pod_uid=uid), t, v + 0.25)]


class Churn:
    """Drives caches the way the agent does: samples every second, flush every 10 s, trim every 60 s."""

    def __init__(self, *caches: MetricCache, clock: FakeClock) -> None:
        self.caches = caches
        self.clock = clock
        self.born: dict[str, tuple[int, float, float]] = {}     # uid -> (n, first, last second alive)
        self.after_flush: list[tuple[int, set[str]]] = []        # (series in caches[0], live uids) per flush

    def live(self, t: float) -> list[str]:
        return [uid for uid, (_, first, last) in self.born.items() if first <= t <= last]

    def run(self, seconds: int, start: int = 0, flush_every: int = 10) -> None:
        for k in range(start, start + seconds):
            t = T0 + k
            self.clock.now = t
            for j in range(ARRIVALS):
                uid = f"pod-{k}-{j}"
                self.born[uid] = (len(self.born), t, t + LIFETIME - 1)
            for uid in LONG:
                self.born.setdefault(uid, (len(self.born), T0, INF))
            batch = [s for uid in self.live(t) for s in pod_samples(uid, self.born[uid][0], t)]
            for c in self.caches:
                c.append(batch)
            if k % flush_every == flush_every - 1:
                for c in self.caches:
                    c.flush()
                    if k % 60 == 59:
                        c.trim()
                self.after_flush.append((self.caches[0].series_count(), set(self.live(t))))


def assert_same_answers(bounded: MetricCache, reference: MetricCache, uids, now: float) -> None:
    windows = [(0, INF), (now - 60, now), (now - 630, now - 500), (T0 + 100, T0 + 400), (now - 300, now - 200),
               (T0 + 5, T0 + 20), (T0 + 12, INF)]
    for uid in uids:
        for name in ("pod_cpu_usage", "pod_memory_usage", "container_cpu_usage"):
            for start, end in windows:
                got = sorted(bounded.query(name, {"pod_uid": uid}, start, end).values())
                want = sorted(reference.query(name, {"pod_uid": uid}, start, end).values())
                assert got == want, (uid, name, start, end)


@pytest.fixture
def pair(tmp_path):
    clock = FakeClock()
    # a 10-minute memory window (default 30) so a short run sees the floor pass evicted series
    bounded = MetricCache(str(tmp_path / "bounded"), max_series=500, memory_window=600, clock=clock)
    reference = MetricCache(str(tmp_path / "reference"), max_series=10**9, memory_window=600, clock=clock)
    yield bounded, reference, clock
    bounded.close()
    reference.close()


@pytest.mark.slow
def test_series_stay_under_the_cap_live_kept_dead_answered_from_disk(pair):
    bounded, reference, clock = pair
    churn = Churn(bounded, reference, clock=clock)
    churn.run(900)                   # 15 minutes, 3,600 pods: the floor moves past the first evictions
    assert all(count <= 500 for count, _ in churn.after_flush)
    live = churn.after_flush[-1][1]
    assert live <= {lb["pod_uid"] for lb in bounded.series("pod_cpu_usage")}
    assert reference.series_count() > 5 * bounded.series_count()         # what the cap saved
    evicted, lost = bounded.evicted_count()
    assert evicted > 5_000 and lost == 0
    # every pod, live or deleted, evicted or not, answers exactly as without the cap (no point lost or doubled)
    sample = [uid for i, uid in enumerate(churn.born) if i % 97 == 0] + list(LONG)
    assert_same_answers(bounded, reference, sample, clock.now)


def test_live_series_kept_at_every_flush(pair):
    bounded, _, clock = pair
    churn = Churn(bounded, clock=clock)
    for k in range(0, 600, 10):
        churn.run(10, start=k)
        live = churn.live(clock.now)
        kept = {lb["pod_uid"] for lb in bounded.series("pod_cpu_usage")}
        assert set(live) <= kept and bounded.series_count() <= 500
        # the long-lived pods' whole history is still in memory (never evicted)
        for uid in LONG:
            assert len(bounded.query("pod_cpu_usage", {"pod_uid": uid}, 0, INF)) == k + 10


def test_a_pod_that_comes_back_and_a_late_sample_are_counted_once(pair):
    bounded, reference, clock = pair
    churn = Churn(bounded, reference, clock=clock)
    churn.run(300)
    gone = "pod-10-0"                # died at T0+14, long evicted by now
    assert gone not in {lb["pod_uid"] for lb in bounded.series("pod_cpu_usage")}
    late = [Sample("pod_cpu_usage", labels(pod_uid=gone), T0 + 12.5, -1.0)]     # out of order, after eviction
    back = [s for t in range(300, 320) for s in pod_samples(gone, 7, T0 + t)]   # the same uid again
    for c in (bounded, reference):
        c.append(late + back)
    churn.run(20, start=320)         # flushed, still in memory (idle < 30 s): old points from disk, new from memory
    assert gone in {lb["pod_uid"] for lb in bounded.series("pod_cpu_usage")}
    assert_same_answers(bounded, reference, [gone], clock.now)
    churn.run(200, start=340)        # evicted again
    assert gone not in {lb["pod_uid"] for lb in bounded.series("pod_cpu_usage")}
    assert_same_answers(bounded, reference, [gone], clock.now)
    assert len(bounded.query("pod_cpu_usage", {"pod_uid": gone}, 0, INF)) == 5 + 1 + 20


def test_restart_after_evictions_answers_the_same(tmp_path):
    clock = FakeClock()
    bounded = MetricCache(str(tmp_path / "b"), max_series=500, clock=clock)
    reference = MetricCache(str(tmp_path / "r"), max_series=10**9, clock=clock)
    churn = Churn(bounded, reference, clock=clock)
    churn.run(300)
    bounded.close()
    again = MetricCache(str(tmp_path / "b"), max_series=500, clock=clock)
    try:
        assert_same_answers(again, reference, [uid for i, uid in enumerate(churn.born) if i % 50 == 0],
                            clock.now)
        again.flush()                # the reload brings the whole window back; the next flush applies the cap
        assert again.series_count() <= 500
    finally:
        again.close()
        reference.close()


def test_under_the_cap_nothing_is_evicted(tmp_path):
    clock = FakeClock()
    cache = MetricCache(str(tmp_path), max_series=10_000, clock=clock)
    Churn(cache, clock=clock).run(300)
    assert cache.evicted_count() == (0, 0) and cache.series_count() == 3 * (300 * ARRIVALS + len(LONG))
    cache.close()


def test_memory_only_cache_is_capped_too_and_says_what_it_lost():
    clock = FakeClock()
    cache = MetricCache(None, max_series=500, clock=clock)
    churn = Churn(cache, clock=clock)
    churn.run(600)
    assert all(count <= 500 for count, _ in churn.after_flush)
    evicted, lost = cache.evicted_count()
    assert evicted == lost > 0
    for uid in LONG:                 # live series untouched
        assert len(cache.query("pod_cpu_usage", {"pod_uid": uid}, 0, INF)) == 600


@pytest.mark.slow
def test_the_cache_says_how_much_history_max_bytes_holds_under_a_synthetic_12h_load(tmp_path, caplog):
    """A 12 h load larger than ``max_bytes`` (so the cap, not the retention, bounds the history). The
    estimate made after the first ten minutes predicts the history the cache ends up holding, the cache says when
    it is full, and what it reports held is what a query can still read back."""
    import logging
    clock = FakeClock()
    cache = MetricCache(str(tmp_path), max_bytes=1 << 20, memory_window=600, clock=clock)
    series = [labels(pod_uid=f"pod-{i}") for i in range(200)]
    step = 10.0
    estimates = []
    with caplog.at_level(logging.INFO, logger="koordlet.metriccache.store"):
        for k in range(int(12 * 3600 / step)):
            clock.now = T0 + k * step
            cache.append([Sample("pod_cpu_usage", lb, clock.now, (k * 7919 + i) % 1000 / 7.0)
                          for i, lb in enumerate(series)])
            if k % 30 == 29:                     # a flush and trim every 5 minutes of load
                cache.trim()
                held, holds = cache.history()
                if holds is not None and not estimates:
                    estimates.append(holds)
    held, holds = cache.history()
    assert estimates and holds is not None
    assert held < 12 * 3600 * 0.9                # the cap bounds the history, not the 12 h retention
    assert holds == pytest.approx(held, rel=0.12)   # full: what is on disk (the file is 90-100 % of the cap)
    assert estimates[0] == pytest.approx(held, rel=0.25)   # the early estimate was close
    assert "metric cache full: max_bytes holds" in caplog.text
    assert "max_bytes, not the retention, limits history" in caplog.text
    # what it says it holds is there, and nothing older
    first = cache.query("pod_cpu_usage", {"pod_uid": "pod-0"}, clock.now - held - 600, clock.now - held + 600)
    gone = cache.query("pod_cpu_usage", {"pod_uid": "pod-0"}, T0, clock.now - held - 600)
    assert len(first) > 0 and len(gone) == 0
    cache.close()
