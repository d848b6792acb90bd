"""The stack files a hung run's ranks leave, read back into one line per rank."""

import os
import subprocess
import sys
import time
from pathlib import Path

from exabench import stacks

DUMP = '''Timeout (0:00:05)!
Thread 0x00007fc109c3d6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Thread 0x00007fc10a874b80 (most recent call first):
  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed
  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1133 in _try_get_data
  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1295 in _get_data
  File "/home/u/exabench/exabench/benchmarks/image_classification/pytorch.py", line 392 in _input_throughput
  File "/home/u/exabench/exabench/runner.py", line 93 in run
'''


def test_the_main_threads_innermost_frame_and_the_exabench_frame_that_led_there():
    assert stacks.where(DUMP) == ("torch/utils/data/dataloader.py:1133 in _try_get_data, called from "
                                  "exabench/benchmarks/image_classification/pytorch.py:392 in _input_throughput")


def test_nothing_is_claimed_from_a_file_without_a_stack():
    assert stacks.where("") is None and stacks.where("Timeout (0:00:05)!\n") is None


def test_summary_lists_the_ranks_in_order_and_names_the_files(tmp_path):
    for rank in (10, 2):
        (tmp_path / f"stacks-rank{rank}.txt").write_text(DUMP)
    line = stacks.summary(tmp_path)
    assert line.index("rank 2 at torch/") < line.index("rank 10 at torch/") and str(tmp_path) in line
    assert stacks.summary(tmp_path / "none") is None


def test_nothing_is_armed_outside_a_run_or_past_its_deadline(tmp_path):
    assert stacks.arm(tmp_path, 0, environ={}) is None
    assert stacks.arm(tmp_path, 0, environ={"EXABENCH_DEADLINE": "soon"}) is None
    assert stacks.arm(tmp_path, 0, environ=stacks.deadline_env(2.0)) is None  # inside the margin
    assert not list(tmp_path.iterdir())


def test_an_armed_process_writes_its_stacks_before_the_deadline(tmp_path):
    # A real interpreter armed 10 s ahead (the margin is 5 s: it must be armed within 5 s of the start,
    # on a loaded machine too) and then stuck: the file appears by itself.
    code = ("import sys, time\nfrom pathlib import Path\nfrom exabench import stacks\n"
            "stacks.arm(Path(sys.argv[1]), 3)\ndef stuck():\n    time.sleep(30)\nstuck()\n")
    env = {**os.environ, **stacks.deadline_env(10.0), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env)
    try:
        path = tmp_path / "stacks-rank3.txt"
        for _ in range(200):
            if path.exists() and "most recent call first" in path.read_text():
                break
            time.sleep(0.1)
        assert stacks.where(path.read_text()).startswith("<string>:6 in stuck")
    finally:
        proc.kill()
        proc.wait()


def test_a_stop_mark_is_written_by_sigterm_even_inside_a_blocking_call_and_stays_empty_otherwise(tmp_path):
    # A rank blocked in C (here a read on a pipe nobody writes, as a rank waits inside a collective) is
    # stopped by its launch's SIGTERM: the fault handler writes the mark before the default action ends
    # it. A rank that is never signalled (killed outright) leaves its mark empty.
    import signal
    code = ("import os, sys; from pathlib import Path; from exabench import stacks; "
            "stacks.mark_stops(Path(sys.argv[1]), int(sys.argv[2])); print('armed', flush=True); "
            "r, w = os.pipe(); os.read(r, 1)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(rank)], stdout=subprocess.PIPE,
                              text=True) for rank in (0, 1)]
    for p in procs:
        assert p.stdout.readline().strip() == "armed"
    procs[0].send_signal(signal.SIGTERM)
    procs[1].kill()
    assert procs[0].wait(timeout=30) == -signal.SIGTERM and procs[1].wait(timeout=30) == -signal.SIGKILL
    time.sleep(0.1)
    assert "most recent call first" in (tmp_path / "stopped-rank0.txt").read_text()
    assert (tmp_path / "stopped-rank1.txt").read_text() == ""


def test_a_stop_mark_is_written_when_sigterm_lands_on_a_thread_with_no_python_state(tmp_path):
    # A launcher signals the process; the kernel hands the signal to any thread that does not block
    # it: in a rank, often one of MPI's, OpenMP's or the BLAS's own threads, which have no Python
    # thread state. Here the main thread blocks SIGTERM and a plain C thread (libc's sleep, started
    # with pthread_create) is the only one left to take it: the mark must still be written.
    import signal
    code = ("import ctypes, os, signal, sys; from pathlib import Path; from exabench import stacks; "
            "stacks.mark_stops(Path(sys.argv[1]), 0); libc = ctypes.CDLL(None); tid = ctypes.c_ulong(); "
            "assert libc.pthread_create(ctypes.byref(tid), None, libc.sleep, ctypes.c_void_p(60)) == 0; "
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); print('armed', flush=True); "
            "r, w = os.pipe(); os.read(r, 1)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "armed"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert "most recent call first" in (tmp_path / "stopped-rank0.txt").read_text()
