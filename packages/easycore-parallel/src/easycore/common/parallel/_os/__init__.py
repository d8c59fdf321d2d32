"""Operating-system helpers: lifelines to the parent, signals, thread budgets.

The lowest layer: imports nothing else of easycore-parallel.
"""
