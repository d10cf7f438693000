"""CUDA_VISIBLE_DEVICES as CUDA reads it, mapped onto NVML's devices."""

from monitor.metrics.visible import DeviceId, cuda_ordinals

GPUS = [DeviceId(i, None, f"GPU-{i}{i}{i}{i}-uuid") for i in range(4)]
MIGS = [
    DeviceId(3, 0, "MIG-abcd-0000", parent_uuid="GPU-3333-uuid", gpu_instance_id=1),
    DeviceId(3, 1, "MIG-abce-1111", parent_uuid="GPU-3333-uuid", gpu_instance_id=2),
]


def test_unset_means_every_full_gpu_in_nvml_order():
    assert cuda_ordinals(None, GPUS + MIGS) == {(0, None): 0, (1, None): 1, (2, None): 2, (3, None): 3}


def test_indices_reorder():
    assert cuda_ordinals("2,0", GPUS) == {(2, None): 0, (0, None): 1}


def test_uuid_prefixes_and_mig_uuids():
    assert cuda_ordinals("GPU-1111,MIG-abce", GPUS + MIGS) == {(1, None): 0, (3, 1): 1}


def test_ambiguous_prefix_stops_like_cuda():
    assert cuda_ordinals("0,MIG-abc,1", GPUS + MIGS) == {(0, None): 0}


def test_invalid_entry_stops_the_list():
    assert cuda_ordinals("1,7,2", GPUS) == {(1, None): 0}
    assert cuda_ordinals("1,-1,2", GPUS) == {(1, None): 0}
    assert cuda_ordinals("1, 2", GPUS) == {(1, None): 0, (2, None): 1}


def test_empty_hides_everything():
    assert cuda_ordinals("", GPUS) == {}


def test_legacy_mig_form():
    assert cuda_ordinals("MIG-GPU-3333-uuid/2/0", GPUS + MIGS) == {(3, 1): 0}


def test_duplicates_count_once():
    assert cuda_ordinals("1,1,0", GPUS) == {(1, None): 0, (0, None): 1}
