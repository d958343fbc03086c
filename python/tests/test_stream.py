"""Streaming, cancellation when the iterator is dropped, and the GIL released while the
engine works."""
import _thread
import gc
import threading
import time

import pytest

import deepinfer
from deepinfer import _core
from conftest import idle_stats, wait_for

LONG = deepinfer.SamplingParams(temperature=0, max_tokens=None, ignore_eos=True)  # until the context is full


def test_stream_deltas_add_up_to_generate(default_llm):
    sp = deepinfer.SamplingParams(temperature=0.8, seed=7, max_tokens=20, logprobs=2)
    prompts = ["Hello there", "A list of colours:"]
    want = default_llm.generate(prompts, sp)
    text, ids, lps, finish = {0: "", 1: ""}, {0: [], 1: []}, {0: [], 1: []}, {}
    n_deltas = 0
    for d in default_llm.generate_stream(prompts, sp):
        assert d.index not in finish, "a delta after the request finished"
        text[d.index] += d.text
        ids[d.index] += d.token_ids
        lps[d.index] += d.logprobs
        n_deltas += 1
        if d.finished:
            finish[d.index] = (d.finish_reason, d.stop_reason)
    for i, w in enumerate(want):
        c = w.outputs[0]
        assert (text[i], ids[i], lps[i]) == (c.text, c.token_ids, c.logprobs)
        assert finish[i] == (c.finish_reason, c.stop_reason)
    assert n_deltas > 2  # tokens arrive as they are made, not at the end


def test_stream_flag_on_generate(tiny_float):
    it = tiny_float.generate([0, 1, 2], deepinfer.SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
                             stream=True)
    assert isinstance(it, deepinfer.StreamIterator)
    assert sum(len(d.token_ids) for d in it) == 5
    with pytest.raises(StopIteration):
        next(it)


def _aborted_after(llm, run):
    """run(start) starts an endless request with start(), reads from it and stops it; the
    engine must count one aborted request and nothing may keep running."""
    before = idle_stats(llm)

    def start():
        it = llm.generate_stream([0, 5, 6, 7], LONG)
        first = next(it)
        assert first.token_ids and not first.finished
        return it

    run(start)
    assert wait_for(lambda: llm.stats()["requests_finished_abort"] == before["requests_finished_abort"] + 1)
    after = idle_stats(llm)
    assert after["requests_finished_length"] == before["requests_finished_length"]
    # Far fewer tokens than the context would hold: the request really stopped.
    assert after["generation_tokens_total"] - before["generation_tokens_total"] < llm.max_model_len // 2


def test_dropping_the_iterator_cancels(tiny_float):
    def run(start):
        it = start()
        del it  # the only reference: the iterator is destroyed here
    _aborted_after(tiny_float, run)


def test_close_cancels(tiny_float):
    def run(start):
        it = start()
        it.close()
        with pytest.raises(StopIteration):
            next(it)
    _aborted_after(tiny_float, run)


def test_leaving_a_with_block_cancels(tiny_float):
    def run(start):
        with start() as it:
            next(it)
    _aborted_after(tiny_float, run)


def test_breaking_out_of_a_for_loop_cancels(tiny_float):
    before = idle_stats(tiny_float)["requests_finished_abort"]
    for n, _ in enumerate(tiny_float.generate_stream([0, 9], LONG)):
        if n == 2:
            break
    assert wait_for(lambda: tiny_float.stats()["requests_finished_abort"] == before + 1)


def test_ctrl_c_cancels_generate(tiny_float):
    """KeyboardInterrupt reaches Python between two waits and stops the requests."""
    before = idle_stats(tiny_float)

    def interrupt_when_running():
        if wait_for(lambda: tiny_float.stats()["requests_running"] > 0):
            _thread.interrupt_main()

    t = threading.Thread(target=interrupt_when_running)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            tiny_float.generate([[0, 3], [0, 4]], LONG)
    finally:
        t.join()
    assert wait_for(lambda: tiny_float.stats()["requests_finished_abort"] == before["requests_finished_abort"] + 2)
    idle_stats(tiny_float)


def test_stream_outlives_the_llm_object(tiny_dir):
    llm = deepinfer.LLM(tiny_dir, numerics="float", threads=1, kv_memory="16M")
    it = llm.generate_stream([0, 1], deepinfer.SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    del llm
    gc.collect()
    assert sum(len(d.token_ids) for d in it) == 6


def test_python_threads_run_during_generate(default_llm):
    """A Python thread sees the requests running while generate() is busy with them."""
    seen_running = threading.Event()
    stop = threading.Event()

    def watch():
        while not stop.is_set() and not seen_running.is_set():
            if default_llm.stats()["requests_running"] > 0:
                seen_running.set()
            time.sleep(0.001)

    t = threading.Thread(target=watch)
    t.start()
    try:
        out = default_llm.generate([[0, 100, 200]] * 2, deepinfer.SamplingParams(temperature=0, max_tokens=32,
                                                                                 ignore_eos=True))
    finally:
        stop.set()
        t.join()
    assert all(len(o.outputs[0].token_ids) == 32 for o in out)
    assert seen_running.is_set()  # the event itself, not a count of polls that depends on speed


def test_gil_is_released_inside_one_wait(default_llm):
    """One poll of the engine (the binding's wait) lets another Python thread run throughout:
    the poll waits for a 600-token prefill, and the counter thread keeps counting meanwhile.
    Were the GIL held during the wait, the other thread could not run while this one is inside it."""
    count = [0]
    in_poll = threading.Event()
    ran_during_poll = threading.Event()
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1
            if in_poll.is_set():
                ran_during_poll.set()
            time.sleep(0.0005)

    t = threading.Thread(target=spin)
    t.start()
    try:
        assert wait_for(lambda: count[0] > 0)
        r = _core.Request()
        r.prompt = [0] + list(range(1000, 1600))
        r.params = deepinfer.SamplingParams(temperature=0, max_tokens=1)._to_core()
        batch = default_llm._engine.submit([r])
        in_poll.set()
        updates = batch.poll(120.0)
        in_poll.clear()
    finally:
        stop.set()
        t.join()
    assert updates and updates[0].token_ids  # the poll lasted until the first token
    assert ran_during_poll.is_set()  # the other thread ran while this one was inside poll()
