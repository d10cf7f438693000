"""Files a launcher creates after the start (torchrun --log-dir) can be added to a live follow."""

import time

from monitor.diagnosis.catalogue import load_catalogue
from monitor.session.job_session import JobSession
from monitor.logs.follow import Follower
from monitor.session import job_session
from monitor.session.feeds import SessionFeed
from tests.clock_helpers import FakeClock


def _read_until(read, want: int, seconds: float = 10.0) -> list[str]:
    texts: list[str] = []
    deadline = time.monotonic() + seconds
    while len(texts) < want and time.monotonic() < deadline:
        texts.extend(line.text for line in read())
    return texts


def test_added_file_in_an_unwatched_directory_is_followed_once(tmp_path):
    combined = tmp_path / "run.log"
    combined.write_text("launcher starting\n")
    follower = Follower([str(combined)], clock=FakeClock())  # its reads wait no real time
    try:
        assert _read_until(lambda: follower.read(0.2).lines, 1) == ["launcher starting"]
        rank_file = tmp_path / "logdir" / "attempt_0" / "1" / "stderr.log"
        rank_file.parent.mkdir(parents=True)
        rank_file.write_text("[rank1]: step 1\n")
        follower.add([str(rank_file)])
        follower.add([str(rank_file)])  # asking twice must not read it twice
        with rank_file.open("a") as out:
            out.write("[rank1]: step 2\n")
        assert _read_until(lambda: follower.read(0.2).lines, 2) == ["[rank1]: step 1", "[rank1]: step 2"]
        assert follower.read(0.5).lines == []
    finally:
        follower.close()


def test_run_feed_picks_up_per_rank_files_as_they_appear(tmp_path):
    combined = tmp_path / "run.log"
    combined.write_text("")
    rank_file = tmp_path / "logdir" / "attempt_0" / "2" / "stderr.log"
    created: list = []
    clock = FakeClock()
    session = JobSession([str(combined)], load_catalogue(include_user=False), more_paths=lambda: list(created),
                         clock=clock)
    feed = SessionFeed(session)
    try:
        feed.poll(0.1)
        rank_file.parent.mkdir(parents=True)
        rank_file.write_text(
            "[rank2]: Traceback (most recent call last):\n"
            '[rank2]:   File "/home/u/train.py", line 9, in <module>\n'
            "[rank2]: ValueError: bad batch\n"
        )
        created.append(rank_file)
        clock.advance(job_session.MORE_PATHS_EVERY_S)  # the session asks the job for new files again
        deadline = time.monotonic() + 10
        root = None
        while root is None and time.monotonic() < deadline:
            root = feed.poll(0.2).root_cause or root
        assert root is not None and root.category == "python_exception" and root.rank == 2
    finally:
        feed.close()
