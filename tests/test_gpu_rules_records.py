"""The shipped GPU rules (rules/gpu.toml) on whole records written from the libraries' own format
strings: what the one-line examples of `monitor rules test` cannot show (a message spread over
lines, which of two findings is the root, a reason that moves a message to another category)."""

from __future__ import annotations

import pytest
from diagnosis_helpers import run_lines

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.engine import Engine


@pytest.fixture(scope="module")
def shipped():
    return load_catalogue(include_user=False)


def root_of(catalogue, text: str):
    return run_lines(Engine(catalogue), text).root_cause()


def test_the_drivers_three_line_fallen_off_the_bus_report_is_a_lost_gpu(shipped):
    # NVIDIA/open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/osapi.c, one message
    # printed as three "NVRM:" lines.
    text = (
        "[ 4411.906123] NVRM: The NVIDIA GPU 0000:41:00.0\n"
        "[ 4411.906125] NVRM: (PCI ID: 10de:2330) installed in this system has\n"
        "[ 4411.906126] NVRM: fallen off the bus and is not responding to commands.\n"
    )
    root = root_of(shipped, text)
    assert (root.rule, root.category) == ("gpu-lost", "gpu_hardware")


def test_a_thc_era_assert_is_a_device_assert_with_its_kernel(shipped):
    # torch < 1.5: CUDA's __assertfail line, THCGeneral.cpp's "THCudaCheck FAIL ..." and the
    # traceback ending in "cuda runtime error (%d) : %s at %s:%d".
    text = (
        "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:106: void cunn_ClassNLLCriterion_updateOutput_kernel"
        "(Dtype *, Dtype *, Dtype *, long *, Dtype *, int, int, int, int, long) [with Dtype = float, "
        "Acctype = float]: block: [0,0,0], thread: [9,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
        "THCudaCheck FAIL file=/pytorch/aten/src/THCUNN/generic/ClassNLLCriterion.cu line=110 error=59 : "
        "device-side assert triggered\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 52, in <module>\n'
        "    loss = criterion(out, target)\n"
        "RuntimeError: cuda runtime error (59) : device-side assert triggered at "
        "/pytorch/aten/src/THCUNN/generic/ClassNLLCriterion.cu:110\n"
    )
    root = root_of(shipped, text)
    assert (root.rule, root.category) == ("cuda-device-assert", "cuda_assert")
    assert root.fields["assertion"] == "t >= 0 && t < n_classes"


def test_an_assertion_line_wrapped_before_block_keeps_its_assertion(shipped):
    # The same __assertfail line hard-wrapped by a terminal inside the templated signature: the
    # second half alone still names the assertion.
    text = (
        "/pytorch/aten/src/THC/THCTensorIndex.cu:361: void indexSelectLargeIndex(TensorInfo<T, IndexType>, "
        "TensorInfo<T, IndexType>, TensorInfo<long, IndexType>, int, int, IndexType, IndexType,\n"
        "long) [with T = float, IndexType = unsigned int, DstDim = 2, SrcDim = 2, IdxDim = -2, "
        "IndexIsMajor = true]: block: [41,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
    )
    root = root_of(shipped, text)
    assert (root.rule, root.category) == ("cuda-device-assert", "cuda_assert")
    assert root.fields["assertion"] == "srcIndex < srcSelectDimSize"


def test_a_xid_79_beside_cudas_unknown_error_is_the_root(shipped):
    # CUDA says only "unknown error" once the GPU has fallen off the bus; the driver's Xid names it.
    text = (
        "[rank2]: Traceback (most recent call last):\n"
        '[rank2]:   File "train.py", line 88, in <module>\n'
        "[rank2]:     loss.backward()\n"
        "[rank2]: RuntimeError: CUDA error: unknown error\n"
        "[ 9120.551812] NVRM: Xid (PCI:0000:c1:00): 79, pid=30551, name=python, GPU has fallen off the bus.\n"
    )
    root = root_of(shipped, text)
    assert (root.rule, root.fields["xid"]) == ("gpu-xid", "79")
    alone = root_of(shipped, text.rsplit("\n", 2)[0] + "\n")
    assert (alone.rule, alone.category) == ("cuda-unknown-error", "gpu_hardware")


def test_rocms_memory_fault_is_an_illegal_access_unless_its_reason_is_ecc(shipped):
    # ROCm/ROCR-Runtime core/runtime/runtime.cpp VMFaultHandler.
    fault = "Memory access fault by GPU node-3 (Agent handle: 0x5609d2c4e1a0) on address 0x7fa2e4000000. Reason: {}.\n"
    program = root_of(shipped, fault.format("Page not present or supervisor privilege"))
    assert (program.rule, program.category) == ("cuda-illegal-access", "cuda_assert")
    hardware = root_of(shipped, fault.format("ECC failure (if supported by HW)"))
    assert (hardware.rule, hardware.category) == ("gpu-ecc", "gpu_hardware")


def test_dcgm_names_hardware_xids_but_not_the_programs_own(shipped):
    # NVIDIA/DCGM dcgm_errors.h DCGM_FR_XID_ERROR_MSG "Detected XID %u for GPU %u".
    assert root_of(shipped, "Detected XID 48 for GPU 6\n").rule == "gpu-xid"
    findings = run_lines(Engine(shipped), "Detected XID 13 for GPU 6\n").findings
    assert not [f for f in findings if f.category == "gpu_hardware"]
