"""Whole logs for the rules of the sixth audit against the libraries' own format strings (#34):
uncaught exceptions in the shapes other programs print (TensorFlow's root-error report, CPython's
dump of an exception it could not print, a program's broken sys.excepthook, an exception group
under torchrun --tee's prefix), a command-line tool's usage error, a node that shut down under its
pod or stopped its rendezvous heartbeats, and torch's collective fingerprints. Each text is a probe an
auditor wrote from the source's format string; the test says which finding becomes the root cause,
in which category, naming which rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis_helpers import assert_root_named, diagnosed

CASES = [
    # CPython's object dump of the exception it could not print (sys.stderr gone), under srun --label.
    pytest.param("5: [2025-03-02 14:07:40] rank 5 | step 5120 | loss 2.0137 | 312.4 samples/s\n5: object address  : 0x7f3b9c2e1f80\n5: object refcount : 2\n5: object type     : 0x55d0c3a4e2a0\n5: object type name: KeyError\n5: object repr     : KeyError('labels')\n5: lost sys.stderr\n",
                 'cpython-exception-dump', 'python_exception', 5, id='pyexcshapes-07'),
    # TensorFlow's root-error report with no exception line in view (kubectl logs --tail).
    pytest.param('  File "/usr/local/lib/python3.11/dist-packages/keras/src/utils/traceback_utils.py", line 117, in error_handler\n\n  File "/usr/local/lib/python3.11/dist-packages/keras/src/backend/tensorflow/trainer.py", line 371, in fit\n\n  File "/usr/local/lib/python3.11/dist-packages/keras/src/backend/tensorflow/trainer.py", line 219, in function\n\n  File "/usr/local/lib/python3.11/dist-packages/keras/src/backend/tensorflow/trainer.py", line 132, in multi_step_on_iterator\n\n  File "/app/vit/model.py", line 88, in call\n\n2 root error(s) found.\n  (0) INVALID_ARGUMENT:  Incompatible shapes: [32,196,768] vs. [32,197,768]\n\t [[{{node vit/encoder/add_1}}]]\n\t [[StatefulPartitionedCall/Shape/_8]]\n  (1) INVALID_ARGUMENT:  Incompatible shapes: [32,196,768] vs. [32,197,768]\n\t [[{{node vit/encoder/add_1}}]]\n0 successful operations.\n0 derived errors ignored. [Op:__inference_multi_step_on_iterator_12740]\n',
                 'tf-root-error', 'python_exception', None, id='pyexcshapes-10'),
    # sys.excepthook failing while it reported the real exception, printed after 'Original exception was:'.
    pytest.param('3: [2025-01-20 11:03:17,552] INFO - epoch 2 step 1200 loss 1.742\n3: Error in sys.excepthook:\n3: Traceback (most recent call last):\n3:   File "/home/kim/llm/utils/crash.py", line 27, in _log_and_exit\n3:     logger.error("uncaught exception on rank %d", RANK, exc_info=(etype, value, tb))\n3: NameError: name \'logger\' is not defined\n3: \n3: Original exception was:\n3: Traceback (most recent call last):\n3:   File "/home/kim/llm/train.py", line 214, in <module>\n3:     main()\n3:   File "/home/kim/llm/train.py", line 188, in main\n3:     batch = next(it)\n3:   File "/home/kim/llm/data/shards.py", line 73, in __iter__\n3:     with open(path, "rb") as f:\n3: FileNotFoundError: [Errno 2] No such file or directory: \'/scratch/kim/tok/shard_00417.bin\'\n',
                 'python-exception', 'python_exception', 3, id='pyexcshapes-05'),
    # an exception group's traceback under torchrun --tee's '[default1]:' (no space after it).
    pytest.param('[default1]:  + Exception Group Traceback (most recent call last):\n[default1]:  |   File "/workspace/train.py", line 131, in main\n[default1]:  |     asyncio.run(prefetch_shards(shard_urls))\n[default1]:  |   File "/usr/lib/python3.11/asyncio/runners.py", line 190, in run\n[default1]:  |     return runner.run(main)\n[default1]:  |            ^^^^^^^^^^^^^^^^\n[default1]:  |   File "/workspace/data/prefetch.py", line 40, in prefetch_shards\n[default1]:  |     async with asyncio.TaskGroup() as tg:\n[default1]:  | ExceptionGroup: unhandled errors in a TaskGroup (2 sub-exceptions)\n[default1]:  +-+---------------- 1 ----------------\n[default1]:    | Traceback (most recent call last):\n[default1]:    |   File "/workspace/data/prefetch.py", line 61, in fetch_one\n[default1]:    |     raise ValueError(f"bad shard header in {url}")\n[default1]:    | ValueError: bad shard header in s3://corpus/shards/shard-00417.tar\n[default1]:    +---------------- 2 ----------------\n[default1]:    | Traceback (most recent call last):\n[default1]:    |   File "/workspace/data/prefetch.py", line 61, in fetch_one\n[default1]:    |     raise ValueError(f"bad shard header in {url}")\n[default1]:    | ValueError: bad shard header in s3://corpus/shards/shard-00418.tar\n[default1]:    +------------------------------------\n',
                 'python-exception', 'python_exception', 1, id='pyexcshapes-08-tee'),
    # click's usage error: 'tune' answered by another package's command.
    pytest.param("(ft) user@gpu-node-3:~/ft$ tune run --nproc_per_node 8 full_finetune_distributed --config llama3_1/8B_full\nUsage: tune [OPTIONS] COMMAND [ARGS]...\nTry 'tune --help' for help.\n\nError: No such command 'run'.\n",
                 'cli-usage-error', 'launcher', None, id='launcherexc-10'),
    # the kubelet's graceful node shutdown in kubectl describe, exit code 137 after it.
    pytest.param('$ kubectl -n ml-team describe pod llama-ft-worker-1\nName:             llama-ft-worker-1\nNamespace:        ml-team\nPriority:         0\nService Account:  default\nNode:             gke-train-spot-a100-pool-8f2c1d3e-x7kq/10.128.0.41\nStart Time:       Tue, 04 Mar 2025 09:12:03 +0000\nLabels:           training.kubeflow.org/job-name=llama-ft\n                  training.kubeflow.org/replica-index=1\n                  training.kubeflow.org/replica-type=worker\nStatus:           Failed\nReason:           Terminated\nMessage:          Pod was terminated in response to imminent node shutdown.\nIP:               10.60.3.17\nControlled By:    PyTorchJob/llama-ft\nContainers:\n  pytorch:\n    Image:          us-docker.pkg.dev/acme-ml/train/llama-ft:2025.02\n    State:          Terminated\n      Reason:       Error\n      Exit Code:    137\n',
                 'k8s-node-shutdown', 'node_failure', None, id='nodelost-03'),

]


@pytest.mark.parametrize(("text", "rule", "category", "rank"), CASES)
def test_the_root_cause_is_the_failure_the_library_printed(tmp_path: Path, text: str, rule: str, category: str,
                                                          rank: int | None):
    assert_root_named(tmp_path, text, rule, category, rank)


def test_the_first_root_error_is_the_message_of_tensorflows_graph_execution_error(tmp_path: Path):
    """The exception TF raises says only "Graph execution error:"; the report under it names the op's failure."""
    root = assert_root_named(tmp_path, PYEXC_01, "python-exception", "python_exception", None)
    assert root["fields"]["exc_type"] == "tensorflow.python.framework.errors_impl.InvalidArgumentError"
    assert root["fields"]["message"] == ("Graph execution error: INVALID_ARGUMENT: Received a label value of 10 which "
                                         "is outside the valid range of [0, 10). Label values: 3 7 10 1 4 4 9 0")
    assert root["fields"]["frame_file"] == "/home/ana/cifar/train.py"


def test_a_broken_excepthook_is_not_the_failure_it_was_reporting(tmp_path: Path):
    findings = diagnosed(tmp_path, CASES[2].values[0])["findings"]
    hook = next(f for f in findings if f["rule"] == "python-exception-in-excepthook")
    assert hook["fields"]["exc_type"] == "NameError" and hook["severity"] == "warning"


def test_an_empty_excepthook_report_after_a_finished_run_is_no_failure(tmp_path: Path):
    assert diagnosed(tmp_path, PYEXC_06)["root_cause"] is None


def test_the_other_ranks_collective_stops_before_torchs_list_of_differences(tmp_path: Path):
    root = assert_root_named(tmp_path, HANG_09, "collective-mismatch", "python_exception", 1)
    assert root["fields"]["other_collective"].endswith("pinned_memory=false (default), memory_format=(nullopt)))")
    assert "Collectives differ" not in root["remedy"]


def test_a_rendezvous_timeout_after_nodes_lost_their_heartbeat_sends_the_reader_to_those_nodes(tmp_path: Path):
    root = assert_root_named(tmp_path, NODE_10, "rendezvous-failed", "rendezvous_timeout", None)
    assert "since they had no heartbeat" in root["remedy"] and "--nnodes=MIN:MAX" in root["remedy"]
    lost = next(f for f in diagnosed(tmp_path, NODE_10)["findings"] if f["rule"] == "rdzv-node-heartbeat-lost")
    assert lost["fields"]["nodes"] == "'gpu-b08_4410_0'" and lost["category"] == "node_failure"


# Keras 2's fit() under TensorFlow 2.12: the exception, then the report.
PYEXC_01 = 'Epoch 1/20\n 212/1563 [===>..........................] - ETA: 41s - loss: 1.9821 - accuracy: 0.2874\nTraceback (most recent call last):\n  File "/home/ana/cifar/train.py", line 88, in <module>\n    model.fit(train_ds, validation_data=val_ds, epochs=20)\n  File "/home/ana/.venv/lib/python3.10/site-packages/keras/src/utils/traceback_utils.py", line 70, in error_handler\n    raise e.with_traceback(filtered_tb) from None\n  File "/home/ana/.venv/lib/python3.10/site-packages/tensorflow/python/eager/execute.py", line 53, in quick_execute\n    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,\ntensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:\n\nDetected at node sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits defined at (most recent call last):\n<stack traces unavailable>\n2 root error(s) found.\n  (0) INVALID_ARGUMENT:  Received a label value of 10 which is outside the valid range of [0, 10).  Label values: 3 7 10 1 4 4 9 0\n\t [[{{node sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits}}]]\n\t [[gradient_tape/sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits/_28]]\n  (1) INVALID_ARGUMENT:  Received a label value of 10 which is outside the valid range of [0, 10).  Label values: 3 7 10 1 4 4 9 0\n\t [[{{node sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits}}]]\n0 successful operations.\n0 derived errors ignored. [Op:__inference_train_function_5821]\n'
# The same pair as pyexcshapes-05 with empty bodies, at the shutdown of a run that finished.
PYEXC_06 = '[2025-02-14 18:21:58] epoch 9 | step 4680/4680 | loss 0.8123 | lr 1.0e-05\n[2025-02-14 18:22:03] eval | val_loss 0.9011 | val_acc 0.7734\n[2025-02-14 18:22:41] saved checkpoint to /ckpt/run17/final.pt\n[2025-02-14 18:22:41] training finished in 5:41:12\nError in sys.excepthook:\n\nOriginal exception was:\nError in sys.excepthook:\n\nOriginal exception was:\n'
# TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint check (ProcessGroupWrapper.cpp), rank 1's message.
HANG_09 = '[rank1]:[W reducer.cpp:1360] Warning: find_unused_parameters=True was specified in DDP constructor, but did not find any unused parameters in the forward pass. (function operator())\n[rank1]: Traceback (most recent call last):\n[rank1]:   File "/workspace/asr/train.py", line 412, in <module>\n[rank1]:     asr_brain.fit(hparams["epoch_counter"], train_data, valid_data)\n[rank1]:   File "/usr/local/lib/python3.10/dist-packages/speechbrain/core.py", line 1366, in fit\n[rank1]:     self._fit_train(train_set=train_set, epoch=epoch, enable=enable)\n[rank1]:   File "/usr/local/lib/python3.10/dist-packages/speechbrain/core.py", line 1211, in _fit_train\n[rank1]:     loss = self.fit_batch(batch)\n[rank1]:   File "/workspace/asr/train.py", line 151, in fit_batch\n[rank1]:     self.scaler.scale(loss / self.grad_accumulation_factor).backward()\n[rank1]:   File "/usr/local/lib/python3.10/dist-packages/torch/_tensor.py", line 522, in backward\n[rank1]:     torch.autograd.backward(\n[rank1]:   File "/usr/local/lib/python3.10/dist-packages/torch/autograd/__init__.py", line 266, in backward\n[rank1]:     Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass\n[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=1921, OpType=ALLREDUCE, TensorShape=[6815744], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=1921, OpType=BROADCAST, TensorShape=[1], TensorDtypes=Long, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))).Collectives differ in the following aspects:   Op type: ALLREDUCEvs BROADCAST  Tensor Tensor shapes: 6815744vs 1  Tensor Tensor dtypes: Floatvs Long\n'
# torchelastic dropping a node with no heartbeat (DEBUG), then the rendezvous timing out.
NODE_10 = 'INFO:torch.distributed.elastic.agent.server.api:[default] Worker group FAILED. 3/3 attempts left; will restart worker group\nINFO:torch.distributed.elastic.agent.server.api:[default] Stopping worker group\nINFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous\'ing worker group\nINFO:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node \'gpu-b07_5121_0\' attempts to join the next round of the rendezvous \'ft-run-88\'.\nDEBUG:torch.distributed.elastic.rendezvous.dynamic_rendezvous:As part of the sync operation the node(s) \'gpu-b08_4410_0\' have been removed from the rendezvous \'ft-run-88\' since they had no heartbeat.\nTraceback (most recent call last):\n  File "/usr/local/bin/torchrun", line 8, in <module>\n    sys.exit(main())\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper\n    return f(*args, **kwargs)\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/run.py", line 762, in main\n    run(args)\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/run.py", line 753, in run\n    elastic_launch(\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/launcher/api.py", line 132, in __call__\n    return launch_agent(self._config, self._entrypoint, list(args))\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/launcher/api.py", line 237, in launch_agent\n    result = agent.run()\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/metrics/api.py", line 129, in wrapper\n    result = f(*args, **kwargs)\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/agent/server/api.py", line 709, in run\n    result = self._invoke_run(role)\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/agent/server/api.py", line 873, in _invoke_run\n    self._restart_workers(self._worker_group)\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/metrics/api.py", line 129, in wrapper\n    result = f(*args, **kwargs)\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/agent/server/api.py", line 678, in _initialize_workers\n    self._rendezvous(worker_group)\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/metrics/api.py", line 129, in wrapper\n    result = f(*args, **kwargs)\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/agent/server/api.py", line 538, in _rendezvous\n    store, group_rank, group_world_size = spec.rdzv_handler.next_rendezvous()\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 1024, in next_rendezvous\n    self._op_executor.run(join_op, deadline)\n  File "/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 637, in run\n    raise RendezvousTimeoutError()\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n'
