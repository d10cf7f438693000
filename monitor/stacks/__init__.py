"""Every rank's Python stack, taken from outside with py-spy, and what the stacks say about a
hang: the rank that is somewhere else while its peers wait in a collective.

Plain data in and out (``capture.py``'s dataclasses); no UI, no torch.
"""
