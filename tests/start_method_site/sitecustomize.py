"""Python processes started by a test run under ``EASYCORE_TEST_START_METHOD`` get that
default start method too (see tests/default_start_method.py, which puts this folder on
their ``PYTHONPATH``)."""

import os
import sys

if os.environ.get("EASYCORE_TEST_START_METHOD"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        from default_start_method import make_default
    finally:
        del sys.path[0]
    make_default(os.environ["EASYCORE_TEST_START_METHOD"])
