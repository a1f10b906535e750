"""Stop signals reach the main thread through a socket, so that no signal can land while the main
thread holds a lock the handler needs (core/stopsignals.py). The test drives a child process's main
thread through thousands of rounds of the polling loop `serve` runs, one signal per round: a
handler that set a `threading.Event` polled this way hung within a few thousand signals."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

ROUNDS = 15000

CHILD = textwrap.dedent(
    f"""
    import signal, sys
    from cloudprovider_grpc.core.stopsignals import StopSignals
    for n in range({ROUNDS}):
        with StopSignals((signal.SIGUSR1,)) as stop:
            sys.stdout.write("ready\\n"); sys.stdout.flush()
            while stop.wait(0.00001) is None:  # the short poll that leaves no gap between waits
                pass
    print("done", flush=True)
    """
)


def test_a_stop_signal_per_round_is_received_every_round() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    try:
        received = 0
        while True:
            ready, _, _ = select.select([child.stdout], [], [], 20)
            assert ready, f"the child stopped answering after {received} signals"
            line = child.stdout.readline()
            if line != "ready\n":
                break
            child.send_signal(signal.SIGUSR1)
            received += 1
        assert (line, received) == ("done\n", ROUNDS)
        assert child.wait(20) == 0
    finally:
        child.kill()
        child.wait()


def test_a_signal_before_the_wait_is_returned_and_the_old_handler_comes_back() -> None:
    code = textwrap.dedent(
        """
        import os, signal
        from cloudprovider_grpc.core.stopsignals import StopSignals
        before = signal.getsignal(signal.SIGTERM)
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives before anyone waits
            first = stop.wait(5)
            again = stop.wait(0)
        print(first.name, again.name, signal.getsignal(signal.SIGTERM) is before, signal.set_wakeup_fd(-1))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["SIGTERM", "SIGTERM", "True", "-1"], out.stderr
