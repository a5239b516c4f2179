"""Write turns between the worker processes of one SQLite database.

SQLite lets one connection write at a time. A writer that finds the lock taken sleeps in
its busy handler (1, 2, 5 ... up to 100 ms) and looks again; meanwhile the writer that
held the lock, its next batch already queued, takes it again at once. With several
workers, each with its own group-commit writer, one worker's beacons could so wait for
seconds while another's committed batch after batch.

``WriteTurns`` makes the writers take turns. It is two ``flock`` locks on files beside the
database: the turn itself, and a gate in front of it. A writer takes the gate, then the
turn, then lets the gate go, and lets the turn go after its commit. The writer waiting for
the turn holds the gate, so the writer that just committed cannot take the turn again
before it: it waits at the gate. The waits are in the kernel (a waiter is woken when the
lock is let go, not at its next poll), and a process that dies lets both go, so a killed
worker never leaves a lock behind.

There is no time limit on the wait: ``flock`` has none, and the one holder of the turn is
committing, which SQLite's own ``busy_timeout`` still bounds. A worker stopped (not
killed) while it holds the turn holds up the others' writes until it resumes or dies.

The turns make the writers fair; they do not make the writes right (SQLite's lock does).
So the writer commits without its turn when the lock files fail (``_Writer._commit``).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def turn_files(db: Path) -> tuple[Path, Path]:
    """The gate's and the turn's lock files of the database ``db``."""
    return db.with_name(db.name + "-gate"), db.with_name(db.name + "-turn")


class WriteTurns:
    """Turns at writing ``db`` for its writers in several processes (one per process)."""

    def __init__(self, db: Path) -> None:
        self._files = turn_files(db)
        self._open()

    def _open(self) -> None:
        # A lock belongs to an open file, which a fork shares: each process opens its own.
        self._pid = os.getpid()
        gate, turn = self._files
        self._gate = os.open(gate, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            self._turn = os.open(turn, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            os.close(self._gate)
            raise

    def take(self, *, wait: bool = True) -> bool:
        """Take the turn; with ``wait=False``, False at once when it is not free (or another
        writer is first in line at the gate)."""
        if os.getpid() != self._pid:  # made before a fork: the parent's files are its own
            os.close(self._turn)  # closing a copy lets go of no lock the parent holds
            os.close(self._gate)
            self._open()
        flags = fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB
        try:
            fcntl.flock(self._gate, flags)
        except BlockingIOError:
            return False
        try:
            fcntl.flock(self._turn, flags)
        except BlockingIOError:
            return False
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        return True

    def give(self) -> None:
        """Let the turn go (after the commit or the rollback)."""
        fcntl.flock(self._turn, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._turn)
        os.close(self._gate)
