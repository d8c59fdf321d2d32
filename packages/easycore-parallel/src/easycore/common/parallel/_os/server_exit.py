"""Preloaded by the forkserver only (see ``startup.PRELOAD``): the server's exit is quick.

The forkserver outlives its caller by its own shutdown: when the caller
exits, the server sees the end of its pipe and leaves through the
interpreter's normal shutdown, whose garbage collections visit every object
of the ~160 modules it imported (4-5 ms on the 2-core VM). Meanwhile it holds
the caller's standard output and error, so ``subprocess.run``, a shell
pipeline (``python script.py | tee log``) or a test runner reading them
waits for it. Imported here, the server freezes its objects (``gc.freeze``)
at its exit (an ``atexit`` handler): the shutdown runs as before, every
handler included, but its collections skip them. The workers it forks end with
``os._exit`` and never run it.
"""

from __future__ import annotations

import atexit
import gc

# Whenever it runs among the server's handlers, they run as they would: freezing
# only keeps the objects out of the shutdown's collections.
atexit.register(gc.freeze)
