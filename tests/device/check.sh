#!/usr/bin/env bash
# The device check, for a machine with one NVIDIA GPU (torch with CUDA, nvidia-ml-py): NVML
# read raw and through the monitor, the Prometheus endpoint, and real NCCL jobs run under
# `monitor run` (tests/jobs/gpu_job.py), each then diagnosed again from its log. Everything lands
# in one folder, packed as $OUT/device.tar.gz. Run from the repository root:
#   bash tests/device/check.sh [SCENARIO ...]   (default: every scenario of gpu_job.py)
# Where monitor's dependencies are not installed, put their wheels' folder on PYTHONPATH first.
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(ok oom assert timeout timeout-item duplicate)
work=/tmp/device-check
rm -rf "$work" && mkdir -p "$work" "${OUT:=/tmp/device-out}"
{
    nvidia-smi
    nvidia-smi --format=csv --query-gpu=name,uuid,driver_version,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,utilization.gpu,utilization.memory,clocks_event_reasons.active,ecc.errors.corrected.volatile.total,pcie.link.gen.current
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
    python3 -m pip list 2>/dev/null | grep -iE "^(nvidia-ml-py|psutil|regex|prometheus|watchdog|textual) "
} > "$work/env.txt" 2>&1
timeout 60 python3 tests/device/nvml_probe.py "$work/nvml_probe.json" > "$work/nvml_probe.err" 2>&1
timeout 30 python3 -m monitor metrics --once > "$work/metrics_once.txt" 2>&1
timeout 30 python3 -m monitor metrics --json --count 3 --interval 1 > "$work/metrics_idle.jsonl" 2> "$work/metrics_idle.err"
timeout 20 python3 -m monitor metrics --serve 9477 --count 8 --interval 1 > "$work/serve.txt" 2>&1 &
sleep 5
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9477/metrics', timeout=5).read().decode())" > "$work/prometheus.txt" 2>&1
wait
# The watch screen's GPU panel on the real sampler, while the GPU works (tui_gpu_panel.py).
python3 -c "
import time, torch
held = torch.empty(20 << 30, dtype=torch.uint8, device='cuda'); a = torch.randn(8192, 8192, device='cuda'); start = time.time()
while time.time() - start < 20: a @ a; torch.cuda.synchronize()
" > "$work/gpu_load.txt" 2>&1 &
sleep 8
timeout 120 python3 tests/device/tui_gpu_panel.py sample_logs/gpu/oom-1rank.log "$work/tui" > "$work/tui.txt" 2>&1
nvidia-smi --format=csv --query-gpu=utilization.gpu,memory.used,power.draw,temperature.gpu >> "$work/tui.txt" 2>&1
wait
launcher=(torchrun)
command -v torchrun > /dev/null || launcher=(python3 -m torch.distributed.run)
for scenario in "${scenarios[@]}"; do
    ranks=1 && [ $scenario = duplicate ] && ranks=2
    if [ $scenario = ok ]; then export NCCL_DEBUG=INFO; else unset NCCL_DEBUG; fi
    timeout 150 python3 -m monitor run --headless --log-dir "$work/$scenario" -- \
        "${launcher[@]}" --nproc-per-node $ranks tests/jobs/gpu_job.py $scenario > "$work/$scenario.out" 2>&1
    echo "$scenario run exit $?" >> "$work/exits.txt"
    timeout 60 python3 -m monitor diagnose --json "$work/$scenario"/run-*.log > "$work/$scenario.diagnose.json" 2> "$work/$scenario.diagnose.err"
    echo "$scenario diagnose exit $?" >> "$work/exits.txt"
done
tar czf "$OUT/device.tar.gz" -C /tmp device-check
cat "$work/exits.txt"
