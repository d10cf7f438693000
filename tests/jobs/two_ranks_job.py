"""Two ranks without torch (RANK and LOCAL_RANK set as a launcher sets them), each printing a
step and a loss every half second; rank 1 then prints an uncaught-exception traceback, and both
stay alive ``LINGER`` seconds so that a scraper sees the root cause while the job still runs.
"""
import os
import subprocess
import sys
import time
if len(sys.argv) == 1:
    procs = [subprocess.Popen([sys.executable, __file__, str(r)], env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    sys.exit(max(p.wait() for p in procs))
rank = int(sys.argv[1])
for step in range(int(os.environ.get("STEPS", "8"))):
    print(f"[rank{rank}]: step {step} loss {1.0 / (step + 1):.4f}", flush=True)
    time.sleep(0.5)
if rank == 1:
    print("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"train.py\", line 9, in <module>\n[rank1]: ValueError: bad batch", flush=True)
time.sleep(float(os.environ.get("LINGER", "3")))
sys.exit(1 if rank == 1 else 0)
