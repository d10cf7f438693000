"""Every NVML call the sampler makes, on the real driver: what it returned (type, fields,
value) or which error it raised, and how long it took. Written as JSON to argv[1]; compared
with tests/metrics_fake_nvml.py (the fake the suite runs on) by tests/test_metrics_fake_fidelity.py.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pynvml

from monitor.metrics import gpu


def describe(value: Any) -> Any:
    """A JSON picture of an NVML result: ctypes structures as their fields, lists item by item."""
    if isinstance(value, (list, tuple)):
        return [describe(item) for item in value[:8]]
    if hasattr(value, "_fields_"):
        return {"type": type(value).__name__, **{name: describe(getattr(value, name)) for name, *_ in value._fields_}}
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return {"bytes": value.decode(errors="replace")}
    return {"type": type(value).__name__, "repr": repr(value)[:200]}


def probe(name: str, *args: Any) -> dict:
    fn = getattr(pynvml, name, None)
    if fn is None:
        return {"call": name, "outcome": "absent"}
    start = time.perf_counter()
    try:
        result = fn(*args)
    except pynvml.NVMLError as exc:
        return {"call": name, "outcome": "error", "error": type(exc).__name__, "message": str(exc),
                "ms": round((time.perf_counter() - start) * 1000, 3)}
    return {"call": name, "outcome": "ok", "type": type(result).__name__, "value": describe(result),
            "ms": round((time.perf_counter() - start) * 1000, 3)}


def main() -> int:
    pynvml.nvmlInit()
    calls = [probe("nvmlSystemGetDriverVersion"), probe("nvmlDeviceGetCount")]
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for name, *args in [
        ("nvmlDeviceGetName",), ("nvmlDeviceGetUUID",), ("nvmlDeviceGetMigMode",),
        ("nvmlDeviceGetMaxMigDeviceCount",), ("nvmlDeviceGetUtilizationRates",),
        ("nvmlDeviceGetTemperature", gpu._TEMPERATURE_GPU), ("nvmlDeviceGetPowerUsage",),
        *[(symbol,) for symbol in gpu._POWER_LIMIT_SYMBOLS],
        ("nvmlDeviceGetClockInfo", gpu._CLOCK_SM), ("nvmlDeviceGetClockInfo", gpu._CLOCK_MEM),
        *[(symbol,) for symbol in gpu._CLOCK_REASON_SYMBOLS],
        ("nvmlDeviceGetRemappedRows",), ("nvmlDeviceGetRetiredPages", gpu._RETIRED_SBE),
        ("nvmlDeviceGetRetiredPages", gpu._RETIRED_DBE), ("nvmlDeviceGetFanSpeed",),
        ("nvmlDeviceGetPcieThroughput", gpu._PCIE_TX_BYTES), ("nvmlDeviceGetPcieThroughput", gpu._PCIE_RX_BYTES),
        ("nvmlDeviceGetTotalEccErrors", gpu._ERROR_CORRECTED, gpu._VOLATILE_ECC),
        ("nvmlDeviceGetTotalEccErrors", gpu._ERROR_UNCORRECTED, gpu._VOLATILE_ECC),
        ("nvmlDeviceGetMemoryInfo",), ("nvmlDeviceGetMemoryInfo", pynvml.nvmlMemory_v2),
        *[(symbol,) for symbol in gpu._PROCESS_SYMBOLS],
    ]:
        calls.append(probe(name, handle, *args))
    events = probe("nvmlEventSetCreate")
    calls.append(events)
    if events["outcome"] == "ok":
        event_set = pynvml.nvmlEventSetCreate()
        calls.append(probe("nvmlDeviceRegisterEvents", handle, gpu._EVENT_XID, event_set))
        for symbol in gpu._EVENT_WAIT_SYMBOLS:
            calls.append(probe(symbol, event_set, 0))
        calls.append(probe("nvmlEventSetFree", event_set))
    pynvml.nvmlShutdown()
    with open(sys.argv[1], "w") as out:
        json.dump({"nvml_binding": getattr(pynvml, "__version__", None), "calls": calls}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
