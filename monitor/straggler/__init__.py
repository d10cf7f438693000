"""The slow rank of a running job, named from outside it (no code change in the training script):
how often each rank waits inside a collective (its py-spy stacks, sampled at a low rate), its
step time where the ranks print steps, and its GPU's clocks and throttle reasons (NVML). A rank
the others steadily wait for is named (``score.py``); plain data in and out (``model.py``).
"""
