"""A script whose top level raises when anything but the caller imports it, run
with the fork server preloading it (``python raises_in_fork_server.py KIND``, KIND
``pool`` or ``runner``; Python 3.13.8 and 3.14.1 on, emulated before them): the
server dies importing it, and easycore's error must name the server and where
to look, not the standard library's bare ``EOFError``.
"""

from easycore.common.parallel import Pool, UnorderedRunner

if __name__ != "__main__":
    raise ValueError("this script runs only as the main script")


class Echo(UnorderedRunner):
    producer_work = staticmethod(lambda device, cfg, data: data)


if __name__ == "__main__":
    import sys

    from _fork_server_preloads import emulate_main_preload

    emulate_main_preload()
    if sys.argv[1] == "pool":
        with Pool(2, start_method="forkserver") as pool:
            print("done", pool.map(abs, [-1, 2]))
    else:
        with Echo(devices=2, start_method="forkserver") as runner:
            print("done", runner([1, 2]))
