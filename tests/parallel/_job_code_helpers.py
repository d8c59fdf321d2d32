"""Module-level functions for test_pool_job_code.py (pickled by reference)."""

from __future__ import annotations


def named(x):
    return f"named {x}"


def other(x):
    return f"other {x}"


def rebind(_):
    """Rebinds ``named`` in this (worker) process, as a job may."""
    globals()["named"] = other
    return True


def add_all(values, x):
    return x + sum(values)
