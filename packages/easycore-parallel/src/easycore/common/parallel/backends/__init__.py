"""Back-ends: start, stop and carry messages to process, thread and Ray workers.

Layer: below `engine`, above `worker` and `transport`. `policy` is the only place
that picks a start method and a transport.
"""
