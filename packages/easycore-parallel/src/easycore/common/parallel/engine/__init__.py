"""The engine: jobs, dispatch, ordering and supervision of the workers.

Layer: below the clients (runner, pool, background, jobqueue, services), above
`backends`. Nothing here imports a client.
"""
