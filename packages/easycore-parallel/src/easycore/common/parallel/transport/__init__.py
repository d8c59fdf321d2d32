"""How payloads travel between the caller and its workers (pickles, shared memory).

Layer: below `worker`, above `_os`.
"""
