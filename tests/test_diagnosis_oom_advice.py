"""CUDA OOM advice: never suggest mixed precision the job already uses; an OOM in model setup
is the model not fitting, not the batch (advice if_record/unless_record)."""

from __future__ import annotations

import pytest
from diagnosis_helpers import OOM_TRACEBACK, run_lines

from monitor.diagnosis.catalogue import RuleError, load_catalogue
from monitor.diagnosis.engine import Engine

BF16_ADVICE = "Train in bf16 mixed precision"
BATCH_ADVICE = "Lower the per-GPU micro-batch"
SETUP_ADVICE = "the model itself does not fit"


def oom_remedy(text: str) -> str:
    engine = run_lines(Engine(load_catalogue([], include_user=False)), text)
    (oom,) = [f for f in engine.findings if f.rule == "cuda-oom"]
    return oom.remedy


def test_oom_in_a_training_step_advises_batch_and_bf16():
    remedy = oom_remedy(OOM_TRACEBACK)
    assert BATCH_ADVICE in remedy and BF16_ADVICE in remedy and SETUP_ADVICE not in remedy


@pytest.mark.parametrize("setting", [
    "accelerate launch --num_processes 8 --mixed_precision bf16 train.py",
    "accelerate launch --mixed_precision=fp16 train.py",
    "Accelerator(mixed_precision=\"bf16\")",
    "mixed_precision: bf16",
    "torchrun --nproc_per_node 8 run_clm.py --bf16 --per_device_train_batch_size 8",
    "TrainingArguments(output_dir=out, bf16=True, ...)",
    '"bf16": true,',
    '"fp16": {"enabled": true, "loss_scale": 0}',
    "with torch.autocast(device_type='cuda', dtype=torch.bfloat16):",
])
def test_bf16_advice_is_left_out_when_the_job_already_uses_mixed_precision(setting):
    assert BF16_ADVICE not in oom_remedy(setting + "\n" + OOM_TRACEBACK)
    # Seen after the OOM: the remedy is rendered again without it.
    assert BF16_ADVICE not in oom_remedy(OOM_TRACEBACK + "\n" + setting)


@pytest.mark.parametrize("setting", ["run_clm.py --bf16 False", "bf16 not supported, falling back", '"fp16": {"enabled": false}'])
def test_bf16_advice_stays_when_mixed_precision_is_off(setting):
    assert BF16_ADVICE in oom_remedy(setting + "\n" + OOM_TRACEBACK)


@pytest.mark.parametrize("frame", [
    '[rank3]:     model = torch.nn.parallel.DistributedDataParallel(',
    '[rank3]:     model = AutoModelForCausalLM.from_pretrained(name)',
    '[rank3]:     model.load_state_dict(state)',
    '[rank3]:     model.to(device)',
])
def test_oom_during_model_setup_leads_with_the_model_not_fitting(frame):
    setup = OOM_TRACEBACK.replace("[rank3]:     loss = model(batch)", frame)
    remedy = oom_remedy(setup)
    assert SETUP_ADVICE in remedy and "DeepSpeed ZeRO-3" in remedy
    assert BATCH_ADVICE not in remedy and BF16_ADVICE not in remedy


def test_a_bad_record_condition_is_a_rule_error(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "x.toml").write_text(
        '[[rule]]\nid = "x"\ncategory = "cuda_oom"\nseverity = "error"\nrole = "root"\ntitle = "x"\n'
        'patterns = ["boom happened"]\n\n[[rule.advice]]\ntext = "t"\nif_record = "(unclosed"\n'
    )
    with pytest.raises(RuleError, match=r"x\.toml:\d+: .*bad if_record pattern"):
        load_catalogue([rules], include_user=False, include_shipped=False)
