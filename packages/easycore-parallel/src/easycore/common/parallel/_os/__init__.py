"""Operating-system helpers: lifelines to the parent, signals, thread budgets,
objects forked workers inherit, the out-of-memory killer's count, GPU device nodes,
a short spin before a blocking wait, the garbage collector around a fork.

The lowest layer: imports nothing else of easycore-parallel.
"""
