"""The engine: many jobs over one set of workers, and what happens when things fail.

Layer: below the clients (runner, pool, background, jobqueue, services), above
``backends``. Nothing here imports a client; clients come in through one door,
[`start`][easycore.common.parallel.engine.door.start] (``door.py``).

The data flow (the caller's process on the left, the workers on the right):

```text
|=========================== caller's process ===========================|== workers ==|

 client               Engine (core.py), its parts over one EngineState (state.py)
 runner, Pool,    +------------+  Job   +-----------------+ RunChunk +---------+
 BackgroundTask,=>| submit_job |=======>| Dispatcher      |=========>| Backend |=> WorkerHandler
 JobQueue         +------------+   lazy | (credits.py):   | items by | process |   runs the
   ^                       input ======>| reserve, take,  | the      | thread  |   chunk's
   |                       (feed)       | encode, send    | Transport| ray     |   items
   |                                    +-----------------+          +---------+     |
   |  JobSink.deliver                                                     |          |
   |  and finish       +------------+   ChunkDone, WorkerFailed,          |          |
   +===================| pump       |<== WorkerReady, WorkerExited (poll)=+<=========+
      (input order:    +------------+
      ordering.py)           | exits, hook failures, deadlines
                             v
                       +----------------+ policy: FailFast (runners) | ReplaceWorker (pools)
                       | Supervisor     | -> requeue, fail the item or the job, or break
                       | (supervision)  | -> restart the worker (outside the lock)
                       +----------------+
```

Client calls ``door.start(backend, options, policy, ...)``:
- the back-end is made from the client's options and its device policy
  (``door.backend_for``); an ``Engine`` over it, with the policy, starts its
  workers (all of them ready, the first one, or none waited for).

``Engine.submit_job(function, source, sink)`` (any thread):
- makes a ``Job`` (``job.py``: its input, sink, chunker, reorder buffer, the
  recorder it reports to) and adds it to ``state.jobs`` and ``state.active``;
- the ``Dispatcher`` hands out free credits: a worker with room gets a place
  reserved in its fifo, the items are taken, encoded by the transport and sent
  as a ``RunChunk`` (a job's function goes with its first chunk to each worker).
  A lazy input is read only by its owner's thread (``Engine.feed``), or by a
  thread of its own when it is a ``BufferedInput`` (``Pool.imap``'s).

``Engine.pump()`` (one thread at a time: a runner's caller, a pool's coordinator,
or a pool's blocking call leading its own job, ``turns.py``):
- polls the back-end; a ``ChunkDone`` pops its chunk from the worker's fifo,
  decodes the results, asks the policy what failed items cost
  (``chunk_failed``) and delivers them outside the lock, through
  ``ordering.deliver`` (in input order for an ordered job) to the ``JobSink``;
- a ``WorkerExited``/``WorkerFailed`` goes to the ``Supervisor``, which takes the
  worker's chunks back, lets the policy settle them and plans a replacement,
  started by the pumping thread outside the lock; it also kills workers whose
  task passed its deadline;
- free credits are handed out again; a job whose last result was delivered
  ends (``JobSink.finish``).

The dispatcher and the supervisor change only the state; a job ends, and the
engine breaks, only in the core, through the ``Outcomes`` interface
(``state.py``) the core implements. No two modules here import each other
(an import-linter contract holds it): ``door`` > ``core`` > ``supervision`` |
``credits`` | ``turns`` > ``state`` > ``job`` > ``ordering`` | ``chunking``.
"""

from .door import start

__all__ = ["start"]
