"""Proving the key, both ways: an HMAC challenge each side answers.

Every connection of easycore's services and ``Queue`` starts with it, before
any pickle is read: the server sends a random challenge, the client answers
with ``HMAC-SHA256(key, "client" + challenge)`` and a challenge of its own,
and the server, once the answer is right, answers that one with
``HMAC-SHA256(key, "server" + challenge)``. So neither side reads a byte
of the other's messages before the other proved it holds the key, and
the role in each MAC keeps one side's answer from serving as the other's.
The shape is ``multiprocessing.connection``'s (``deliver_challenge`` and
``answer_challenge``, in its frames), held as data here instead of run as
blocking calls: the server ([`server`][easycore.common.parallel.connection.server])
runs many handshakes at once from one selector, each under its own
deadline, and a connection that never answers costs only its buffer.
"""

from __future__ import annotations

import hmac
import os
from multiprocessing import AuthenticationError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Tuple

__all__ = ["AuthenticationError", "ClientProof", "ServerProof"]

CHALLENGE = b"#EC-CHALLENGE#"
WELCOME = b"#EC-WELCOME#"
FAILURE = b"#EC-FAILURE#"
_NONCE = 32
_DIGEST = "sha256"
_MAC = 32  # bytes of an HMAC-SHA256


def _mac(authkey: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(authkey, role + nonce, _DIGEST).digest()


class _Proof:
    """One side of one handshake: the key, and the challenge this side sends."""

    __slots__ = ("_authkey", "_nonce")

    def __init__(self, authkey: bytes) -> None:
        self._authkey = authkey
        self._nonce = os.urandom(_NONCE)


class ServerProof(_Proof):
    """The server's side of one handshake: two frames out, one in.

    Args:
        authkey (bytes): the key clients must hold.
    """

    __slots__ = ()

    def challenge(self) -> bytes:
        """The first frame to send."""
        return CHALLENGE + self._nonce

    def answer(self, frame: bytes) -> Tuple[bool, bytes]:
        """Check the client's answer; ``(accepted, the frame to send back)``."""
        expected = _mac(self._authkey, b"client", self._nonce)
        if len(frame) != _MAC + _NONCE or not hmac.compare_digest(frame[:_MAC], expected):
            return False, FAILURE
        return True, WELCOME + _mac(self._authkey, b"server", frame[_MAC:])


class ClientProof(_Proof):
    """The client's side of one handshake: one frame in, one out, one in.

    Args:
        authkey (bytes): the key the server holds.
    """

    __slots__ = ()

    def answer(self, frame: bytes) -> bytes:
        """The answer to the server's challenge (plus ours).

        Raises:
            AuthenticationError: ``frame`` is no challenge.
        """
        if not frame.startswith(CHALLENGE) or len(frame) != len(CHALLENGE) + _NONCE:
            raise AuthenticationError("the other side sent no challenge")
        return _mac(self._authkey, b"client", frame[len(CHALLENGE):]) + self._nonce

    def check(self, frame: bytes) -> None:
        """Check the server's verdict and its answer to our challenge.

        Raises:
            AuthenticationError: refused (a wrong key), or the server's proof is wrong.
        """
        if frame == FAILURE:
            raise AuthenticationError("the key was refused")
        expected = WELCOME + _mac(self._authkey, b"server", self._nonce)
        if not hmac.compare_digest(frame, expected):
            raise AuthenticationError("the other side does not hold the key")
