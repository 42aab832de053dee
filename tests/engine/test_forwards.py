"""`Forwards.close()` waits for the work other threads run, and never for work its own thread left counted: a
KeyboardInterrupt (a signal's exception lands on any line of the main thread) between counting and leaving
must not make closing wait for ever."""

from __future__ import annotations

import threading

import pytest

from assistant.engine.assistant import Closed, Forwards


def closed_within(forwards: Forwards, seconds: float) -> bool:
    closer = threading.Thread(target=forwards.close, daemon=True)
    closer.start()
    closer.join(seconds)
    return not closer.is_alive()


def test_closing_waits_for_the_work_another_thread_runs():
    forwards, inside, leave = Forwards(), threading.Event(), threading.Event()

    def work():
        with forwards.running():
            inside.set()
            leave.wait()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    assert inside.wait(10)
    assert not closed_within(forwards, 0.5)  # the work is still running
    leave.set()
    worker.join(10)
    assert closed_within(forwards, 10)
    with pytest.raises(Closed), forwards.running():
        pass


def test_a_thread_closes_past_the_work_it_left_counted():
    forwards, done = Forwards(), threading.Event()

    def cut_short_then_close():
        forwards.running().__enter__()  # counted, and never left: what an interrupt there leaves
        forwards.close()
        done.set()

    threading.Thread(target=cut_short_then_close, daemon=True).start()
    assert done.wait(10), "close() waited for its own thread's work"
