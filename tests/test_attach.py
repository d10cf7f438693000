"""Instant attach (#14): a watch opened on a big log still being written diagnoses what is
there with diagnose's fast scan, shows its last lines, and follows on from its end: no line
lost or read twice, numbered as a whole read numbers them, the same findings as diagnose."""

from __future__ import annotations

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.session import job_session
from monitor.session.job_session import JobSession
from tests.clock_helpers import FakeClock

OOM = ("[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total "
       "capacity of 79.11 GiB of which 1.19 GiB is free.\n")


def big_log(path, lines: int) -> None:
    with open(path, "w") as handle:
        for i in range(lines):
            handle.write(f"[rank{i % 8}]: step {i // 8} loss {1.0 / (1 + i):.6f} lr 3e-4 grad_norm 0.91 tokens/s 12345\n")
        handle.write(OOM)
        handle.write("[rank0]: step 99999 loss 0.5 and a partial last li")  # still being written


def test_a_big_log_is_scanned_shown_by_its_tail_and_followed_on(tmp_path):
    log = tmp_path / "train.log"
    big_log(log, 80_000)  # ~6.5 MB: over ATTACH_BYTES
    assert log.stat().st_size >= job_session.ATTACH_BYTES
    catalogue = load_catalogue(include_user=False)
    clock = FakeClock()
    session = JobSession([log], catalogue, attach=True, clock=clock)
    try:
        first = session.step(timeout=0.05)
        # The screen gets the tail, numbered as in the file; the OOM is the last complete line.
        assert len(first.lines) == job_session.ATTACH_TAIL_LINES
        assert [l.line for l in first.lines[-2:]] == [80_000, 80_001] and first.lines[-1].text == OOM.strip()
        assert first.lines[-1].rank == 5
        # The writer finishes its line and goes on: read once each, numbers continuing.
        with open(log, "a") as handle:
            handle.write("ne\n[rank1]: step 100000 loss 0.4\n")
        lines = []
        for _ in range(50):
            lines += session.step(timeout=0.05).lines
            if len(lines) >= 2:
                break
        assert [(l.line, l.text) for l in lines] == [
            (80_002, "[rank0]: step 99999 loss 0.5 and a partial last line"), (80_003, "[rank1]: step 100000 loss 0.4")]
        clock.advance(job_session.IDLE_FLUSH_S)  # quiet: the record in progress completes
        session.step(timeout=0.05)
        live = {(f.rule, f.rank, f.line) for f in session.findings}
    finally:
        session.close()
    assert live == {(f.rule, f.rank, f.line) for f in diagnose_paths([log], catalogue).findings}
    assert ("cuda-oom", 5, 80_001) in live  # (the time it takes is measured in benchmarks/attach.py)


async def test_the_screen_reads_back_earlier_lines_on_demand(tmp_path):
    from monitor.tui import watch_app
    from monitor.tui.log_view import LogView
    from tests.test_tui_app import settle

    log = tmp_path / "train.log"
    big_log(log, 80_000)
    app = watch_app([log], catalogue=load_catalogue(include_user=False), bell=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, job_session.ATTACH_TAIL_LINES)
        assert len(app.store) == job_session.ATTACH_TAIL_LINES
        first_shown = app.store.line(0).line
        assert first_shown == 80_001 - job_session.ATTACH_TAIL_LINES + 1
        await pilot.press("L")
        for _ in range(100):
            await pilot.pause(0.05)
            if len(app.store) > job_session.ATTACH_TAIL_LINES:
                break
        view = app.query_one(LogView)
        numbers = [app.store.line(i).line for i in range(len(app.store))]
        assert numbers == list(range(first_shown - 10_000, 80_002))  # in order, none twice, none missing
        assert app.store.line(view.cursor_index).line == first_shown  # the cursor on where it was
        assert app.store.text(0) == f"[rank{(first_shown - 10_001) % 8}]: step {(first_shown - 10_001) // 8} loss " \
            f"{1.0 / (first_shown - 10_000):.6f} lr 3e-4 grad_norm 0.91 tokens/s 12345"
        # The root cause's line (the OOM) is still marked after the store was rebuilt.
        assert any(mark == "root" for mark in view.marks.values())
        # Back to the file's first line, and no further.
        for _ in range(8):
            before = len(app.store)
            await pilot.press("L")
            for _ in range(100):
                await pilot.pause(0.05)
                if len(app.store) > before or app.store.line(0).line == 1:
                    break
        assert app.store.line(0).line == 1 and len(app.store) == 80_001
