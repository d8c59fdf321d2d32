"""Make the fork server import the main script before it forks any worker, as
Python 3.13.8 and 3.14.1 on do (their fix of its ``__main__`` preload), on a
Python without that fix: hand the server the script's path, under the key its
preload reads. Call it in the caller, before the fork server starts.
"""

import multiprocessing.spawn

_preparation_data = multiprocessing.spawn.get_preparation_data


def _with_main_path(name):
    data = _preparation_data(name)
    if "init_main_from_path" in data:
        data["main_path"] = data["init_main_from_path"]
    return data


def emulate_main_preload():
    multiprocessing.spawn.get_preparation_data = _with_main_path
