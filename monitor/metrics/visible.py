"""Which devices a job sees, and in what order: CUDA_VISIBLE_DEVICES as CUDA reads it.

CUDA accepts a comma-separated list of integer indices, ``GPU-<uuid>`` and ``MIG-<uuid>``
(unique prefixes allowed), and the older ``MIG-GPU-<uuid>/<gi>/<ci>`` form. It stops at the
first entry it cannot use, and an empty value hides every device. Integer indices are taken in
PCI bus order (NVML's order), which is CUDA's order when CUDA_DEVICE_ORDER=PCI_BUS_ID and on
the usual node of identical GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeviceId:
    """What identifies a GPU or MIG device for CUDA_VISIBLE_DEVICES."""

    index: int  # NVML index of the physical GPU
    mig_index: int | None  # None for a full GPU
    uuid: str | None
    parent_uuid: str | None = None  # MIG devices: the physical GPU's uuid
    gpu_instance_id: int | None = None  # MIG devices: for the MIG-GPU-<uuid>/<gi>/<ci> form


def cuda_ordinals(visible: str | None, devices: list[DeviceId]) -> dict[tuple[int, int | None], int]:
    """Map (NVML index, MIG index) to the CUDA ordinal a job with ``visible`` would use.

    ``visible`` None means the variable is unset: every full GPU, in NVML order. (With it
    unset, CUDA shows at most one MIG device, so MIG devices get no ordinal.)
    """
    if visible is None:
        full = [d for d in devices if d.mig_index is None]
        return {(d.index, None): n for n, d in enumerate(full)}
    ordinals: dict[tuple[int, int | None], int] = {}
    for token in (t.strip() for t in visible.split(",")):
        device = _resolve(token, devices)
        if device is None:
            break
        key = (device.index, device.mig_index)
        if key not in ordinals:
            ordinals[key] = len(ordinals)
    return ordinals


def _resolve(token: str, devices: list[DeviceId]) -> DeviceId | None:
    if token.isdigit():
        return next((d for d in devices if d.mig_index is None and d.index == int(token)), None)
    if token.startswith("MIG-GPU-"):
        parts = token[len("MIG-"):].split("/")
        if len(parts) < 2 or not parts[1].isdigit():
            return None
        return next(
            (d for d in devices if d.parent_uuid == parts[0] and d.gpu_instance_id == int(parts[1])),
            None,
        )
    if token.startswith("GPU-"):
        return _by_prefix(token, [d for d in devices if d.mig_index is None])
    if token.startswith("MIG-"):
        return _by_prefix(token, [d for d in devices if d.mig_index is not None])
    return None


def _by_prefix(token: str, devices: list[DeviceId]) -> DeviceId | None:
    matches = [d for d in devices if d.uuid and d.uuid.startswith(token)]
    return matches[0] if len(matches) == 1 else None
