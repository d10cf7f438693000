"""A driver-tolerant door to NVML: init with a clear status, one query helper, symbols probed once.

``lib`` is the ``pynvml`` module of nvidia-ml-py, or any module-like object with the same
names (the tests inject a fake). Error classes are always taken from ``lib`` so that a fake
raising the real ``pynvml.NVMLError_*`` classes is handled exactly like the driver.
"""

from __future__ import annotations

import threading
from typing import Any

from monitor.metrics.model import GpuStatus


class GpuLost(Exception):
    """The GPU fell off the bus (NVMLError_GpuIsLost): stop asking it, say so."""


def import_pynvml() -> Any | None:
    """The nvidia-ml-py module, or None when it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def outdated_binding(lib: Any) -> bool:
    """True for a pynvml module from before nvidia-ml-py (nvidia-ml-py3, old pynvml releases).

    Those lack the function lookup that every versioned call goes through, and the newer
    entry points; using them gives scrambled process lists on current drivers.
    """
    return not (hasattr(lib, "_nvmlGetFunctionPointer") and hasattr(lib, "nvmlInitWithFlags"))


class Nvml:
    """An initialised NVML library, or the reason it could not be initialised.

    Not thread-safe by design: one ``Sampler`` owns one ``Nvml`` and calls it from one
    worker thread at a time (polls never overlap).
    """

    def __init__(self, lib: Any | None, *, check_binding: bool = False) -> None:
        self.lib = lib
        self.status: GpuStatus = "ok"
        self.message = ""
        # Functions this driver lacks (FunctionNotFound), reported once so the user can tell
        # that nvidia-ml-py and the driver are of different generations.
        self.missing_functions: set[str] = set()
        # name of a versioned family (e.g. "compute_processes") -> the symbol that works here.
        self._chosen: dict[str, str | None] = {}
        self._lock = threading.Lock()
        self._initialised = False
        if lib is None:
            self.status, self.message = "no_library", "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            return
        if check_binding and outdated_binding(lib):
            self.status, self.message = "error", (
                "the importable pynvml module is an outdated NVML binding (the deprecated pynvml or "
                "nvidia-ml-py3 package shadows nvidia-ml-py): pip uninstall pynvml nvidia-ml-py3 && "
                "pip install --force-reinstall nvidia-ml-py"
            )
            return
        try:
            lib.nvmlInit()
        except lib.NVMLError as exc:
            self.status, self.message = classify_init_error(lib, exc)
            return
        self._initialised = True

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def call(self, name: str, *args: Any) -> Any:
        """Call ``lib.<name>(*args)``; None when the field is not available on this GPU or driver.

        Any NVML error but GpuIsLost (NotSupported, FunctionNotFound, NoPermission, NotFound,
        ...) reads as None; GpuIsLost raises ``GpuLost`` so the caller marks the device.
        """
        outcome, result = self._try(name, args)
        return _decode(result) if outcome == "ok" else None

    def call_outcome(self, name: str, *args: Any) -> tuple[str, Any]:
        """``("ok", result)``, ``("missing", None)`` when this driver or binding lacks the symbol
        (FunctionNotFound; not noted as missing: the caller has another way), or ``("error",
        None)``; GpuIsLost raises ``GpuLost``."""
        outcome, result = self._try(name, args)
        if outcome == "missing":
            self.missing_functions.discard(name)
        return outcome, _decode(result) if outcome == "ok" else None

    def call_ok(self, name: str, *args: Any) -> bool:
        """Call a function run for its effect; True when it succeeded."""
        fn = getattr(self.lib, name, None)
        if fn is None:
            self.missing_functions.add(name)
            return False
        assert self.lib is not None  # fn came from it
        try:
            fn(*args)
        except self.lib.NVMLError as exc:
            if _is_error(self.lib, exc, "NVMLError_FunctionNotFound"):
                self.missing_functions.add(name)
            return False
        return True

    def call_versioned(self, family: str, names: tuple[str, ...], *args: Any) -> Any:
        """Call the newest of ``names`` this driver has; the choice is probed once and kept.

        A symbol is ruled out when it is absent from ``lib`` or raises FunctionNotFound; a
        NotSupported answer keeps the symbol (the field, not the symbol, is missing).
        """
        chosen = self._chosen.get(family, "")
        if chosen is None:
            return None
        candidates = (chosen,) if chosen else names
        for name in candidates:
            outcome, result = self._try(name, args)
            if outcome == "missing":
                continue
            self._chosen[family] = name
            return _decode(result) if outcome == "ok" else None
        self._chosen[family] = None
        return None

    def _try(self, name: str, args: tuple) -> tuple[str, Any]:
        """``("ok", result)``, ``("missing", None)`` when this driver lacks the symbol, or
        ``("error", None)`` for any other NVML error; GpuIsLost raises ``GpuLost``."""
        fn = getattr(self.lib, name, None)
        if fn is None:
            self.missing_functions.add(name)
            return "missing", None
        assert self.lib is not None  # fn came from it
        try:
            return "ok", fn(*args)
        except self.lib.NVMLError as exc:
            if _is_error(self.lib, exc, "NVMLError_GpuIsLost"):
                raise GpuLost(str(exc)) from exc
            if _is_error(self.lib, exc, "NVMLError_FunctionNotFound"):
                self.missing_functions.add(name)
                return "missing", None
            return "error", None

    def shutdown(self) -> None:
        with self._lock:
            if self._initialised:
                assert self.lib is not None  # nvmlInit succeeded on it
                self._initialised = False
                try:
                    self.lib.nvmlShutdown()
                except self.lib.NVMLError:
                    pass


def _is_error(lib: Any, exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is ``lib``'s error class ``name`` (never, where an old binding or a fake
    lacks that class)."""
    return isinstance(exc, getattr(lib, name, ()))


def classify_init_error(lib: Any, exc: Exception) -> tuple[GpuStatus, str]:
    """Turn an nvmlInit failure into a status and one plain sentence."""
    def is_(name: str) -> bool:
        cls = getattr(lib, name, None)
        return cls is not None and isinstance(exc, cls)

    if is_("NVMLError_LibraryNotFound"):
        return "no_library", (
            "NVIDIA driver library libnvidia-ml.so not found: no NVIDIA driver on this machine "
            "(or the container was started without the GPU runtime)"
        )
    if is_("NVMLError_DriverNotLoaded"):
        return "no_driver", "the NVIDIA kernel driver is not loaded (check nvidia-smi, dmesg)"
    if is_("NVMLError_LibRmVersionMismatch"):
        return "version_mismatch", (
            "NVIDIA driver/library version mismatch: the driver was upgraded without a reboot "
            "(reboot, or reload the nvidia kernel modules)"
        )
    if is_("NVMLError_NoPermission"):
        return "error", "no permission to open the NVIDIA devices (/dev/nvidia*)"
    return "error", f"NVML failed to initialise: {exc}"


def _decode(value: Any) -> Any:
    # Older nvidia-ml-py releases return bytes for names, UUIDs and versions.
    return value.decode(errors="replace") if isinstance(value, bytes) else value

