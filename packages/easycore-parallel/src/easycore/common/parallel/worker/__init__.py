"""What runs inside a worker: the protocol it speaks, its loop and its seeding.

Layer: below `backends`, above `transport`.
"""
