"""A job's session: where the findings of every source meet and the root cause is decided once
(``job_session.JobSession``); the feeds every front end reads it through (``feeds``); and the
headless watch (``headless``). Plain Python: the screen, the headless modes and ``monitor run``
all render from it."""
