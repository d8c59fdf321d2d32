"""Connections between processes: one layer for services and the ``Queue``.

Both a service ([`services`][easycore.common.parallel.services]) and a
[`Queue`][easycore.common.parallel.Queue] are a server in one process that
other processes reach over a Unix socket; both speak through this layer, so
each guarantee below is written once:

* [`address`][easycore.common.parallel.connection.address]: the sockets live
  in a private directory of the user's; a dead owner's sockets are swept;
* [`auth`][easycore.common.parallel.connection.auth]: every connection
  proves the key, both ways, before a byte of a pickle is read;
* [`server`][easycore.common.parallel.connection.server]: **where
  connections are accepted**: two threads whatever the number of clients;
  each handshake has its own deadline, so a connection that never answers
  blocks no one; one selector serves every client from its own buffers;
* [`client`][easycore.common.parallel.connection.client]: connecting, each
  send and each wait for a reply take a deadline, so a client's timeout
  bounds its whole call, even with the server stopped (SIGSTOP);
* [`frames`][easycore.common.parallel.connection.frames]: the buffers of
  both sides, in ``multiprocessing.connection``'s frame format.

What travels in the frames is the protocol's own: the services'
[`wire`][easycore.common.parallel.services.wire] messages, the ``Queue``'s
requests.
"""
