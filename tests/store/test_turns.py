"""Write turns between processes: the writer that just committed cannot take the turn again
ahead of one already waiting, and a killed holder leaves no lock behind."""

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time

from edge.store.turns import WriteTurns, turn_files


def _gate_is_held(db):
    gate, _ = turn_files(db)
    fd = os.open(gate, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing the descriptor lets go of a lock it took
    return False


def _wait_for(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_writer_that_gave_the_turn_waits_behind_the_one_already_waiting(tmp_path):
    db = tmp_path / "edge.db"
    a, b = WriteTurns(db), WriteTurns(db)  # two descriptors: as two processes would be
    assert a.take()
    b_has_it = threading.Event()

    def b_writes():
        b.take()
        b_has_it.set()

    t = threading.Thread(target=b_writes, daemon=True)  # a broken lock fails, not hangs
    t.start()
    _wait_for(lambda: _gate_is_held(db))  # b is first in line: it holds the gate
    a.give()
    assert not a.take(wait=False)  # a's next batch waits: b goes first
    assert b_has_it.wait(10)
    assert not a.take(wait=False)  # b holds the turn
    b.give()
    assert a.take(wait=False)
    a.give()
    t.join()
    a.close()
    b.close()


def test_a_free_turn_is_taken_at_once_and_the_files_are_private(tmp_path):
    db = tmp_path / "edge.db"
    turns = WriteTurns(db)
    assert turns.take(wait=False)
    turns.give()
    assert turns.take(wait=False)
    turns.give()
    turns.close()
    for path in turn_files(db):
        assert path.parent == tmp_path and path.name.startswith("edge.db-")
        assert path.stat().st_mode & 0o777 == 0o600


def test_a_killed_holder_leaves_no_lock_behind(tmp_path):
    db = tmp_path / "edge.db"
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from edge.store.turns import WriteTurns\n"
        "t = WriteTurns(Path(sys.argv[1]))\n"
        "t.take()\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"held"
        turns = WriteTurns(db)
        assert not turns.take(wait=False)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert turns.take()  # the kernel let go of the dead process's lock
        turns.give()
        turns.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_a_forked_child_takes_turns_with_its_parent(tmp_path):
    turns = WriteTurns(tmp_path / "edge.db")
    assert turns.take()
    pid = os.fork()
    if pid == 0:  # the child: the parent holds the turn, so it is not free
        os._exit(0 if not turns.take(wait=False) else 1)
    _, status = os.waitpid(pid, 0)
    turns.give()
    turns.close()
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_failing_turn_costs_fairness_not_the_writer(tmp_path, caplog):
    # The turns only make several writers fair: when their lock files fail, each batch is
    # still committed (SQLite's own lock keeps it right) and answered, and the failure is
    # logged once, not per batch.
    import sqlite3

    from edge.store.sqlite import SQLiteStore

    db = tmp_path / "edge.db"
    store = SQLiteStore(db)
    store.open_blocking()
    try:
        writer = store._writer
        assert writer is not None
        turns = writer._turns
        os.close(turns._gate)  # a lost descriptor: every flock on it fails with EBADF
        os.close(turns._turn)

        def note(conn: sqlite3.Connection, n: int) -> int:
            conn.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER)")
            conn.execute("INSERT INTO t VALUES (?)", (n,))
            return n

        with caplog.at_level("WARNING", logger="edge.store"):
            answers = [writer.submit(note, (n,)).result(timeout=10) for n in range(3)]
        assert answers == [0, 1, 2]
        assert writer.turn_failures == 3
        assert sum("write turns failed" in r.getMessage() for r in caplog.records) == 1
    finally:
        writer._turns.close = lambda: None  # its files are closed already
        store.close_blocking()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT n FROM t ORDER BY n").fetchall() == [(0,), (1,), (2,)]
    conn.close()
