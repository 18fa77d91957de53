"""The public Python client of the Durable Streams protocol (`durable-streams`
on PyPI) against a running `eddy serve`: what a Python user does first.

    python client_test.py BASE_URL LABEL

Each check runs on a stream of its own; the last line is
`python client (LABEL): N passed, N failed`.
"""

import sys
import threading
import traceback
import uuid

from durable_streams import DurableStream, SeqConflictError, stream

BASE = sys.argv[1].rstrip("/")
LABEL = sys.argv[2] if len(sys.argv) > 2 else "eddy"
JSON = "application/json"
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def url(name):
    return f"{BASE}/v1/stream/python/{name}-{uuid.uuid4().hex[:8]}"


def expect(actual, wanted, what):
    if actual != wanted:
        raise AssertionError(f"{what}: {actual!r} != {wanted!r}")


@check
def create_batched_appends_and_read_from_the_start():
    u = url("batched")
    with DurableStream.create(u, content_type=JSON) as handle:
        threads = [
            threading.Thread(target=handle.append, args=({"n": n},)) for n in range(20)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    with stream(u, live=False) as res:
        items = res.read_json()
    expect(sorted(item["n"] for item in items), list(range(20)), "items read from the start")


@check
def sequential_appends_read_back_in_order():
    u = url("sequential")
    with DurableStream.create(u, content_type=JSON, batching=False) as handle:
        for n in range(5):
            handle.append({"n": n})
        with handle.stream(live=False) as res:
            expect([item["n"] for item in res.read_json()], list(range(5)), "order")


@check
def a_bytes_stream_round_trips():
    u = url("bytes")
    payload = bytes(range(256)) * 4
    with DurableStream.create(u, content_type="application/octet-stream", batching=False) as handle:
        handle.append(payload[:500])
        handle.append(payload[500:])
    with stream(u, live=False) as res:
        expect(res.read_bytes(), payload, "bytes read back")


@check
def a_reader_resumes_from_the_offset_it_was_given():
    u = url("resume")
    with DurableStream.create(u, content_type=JSON, batching=False) as handle:
        handle.append({"n": 1})
        handle.append({"n": 2})
        with handle.stream(live=False) as res:
            expect([i["n"] for i in res.read_json()], [1, 2], "first read")
            saved = res.offset
        handle.append({"n": 3})
        with handle.stream(offset=saved, live=False) as res:
            expect([i["n"] for i in res.read_json()], [3], "read from the saved offset")


@check
def a_long_poll_reader_gets_what_is_appended_later():
    u = url("long-poll")
    got = []
    with DurableStream.create(u, content_type=JSON, batching=False) as handle:
        handle.append({"n": 0})
        with handle.stream(live=False) as res:
            res.read_json()
            tail = res.offset

        def read():
            with stream(u, offset=tail, live="long-poll") as res:
                for item in res.iter_json():
                    got.append(item)
                    return

        # Read from the tail saved before the append: the answer is the
        # appended item whether the read waits or comes after it.
        reader = threading.Thread(target=read)
        reader.start()
        handle.append({"n": 1})
        reader.join(timeout=20)
    expect(got, [{"n": 1}], "long-poll answer")


@check
def an_sse_reader_gets_what_is_appended_later():
    u = url("sse")
    got = []
    with DurableStream.create(u, content_type=JSON, batching=False) as handle:
        handle.append({"n": 0})

        def read():
            # The protocol requires an offset for SSE; -1 is the start.
            with stream(u, offset="-1", live="sse") as res:
                for item in res.iter_json():
                    got.append(item)
                    if len(got) == 2:
                        return

        # From -1, the events are the same whether the append comes
        # before the read or while it waits.
        reader = threading.Thread(target=read)
        reader.start()
        handle.append({"n": 1})
        reader.join(timeout=20)
    expect(got, [{"n": 0}, {"n": 1}], "SSE events")


@check
def stream_seq_refuses_a_lower_sequence():
    u = url("seq")
    with DurableStream.create(u, content_type=JSON, batching=False) as handle:
        handle.append({"n": 1}, seq="002")
        try:
            handle.append({"n": 2}, seq="001")
        except SeqConflictError:
            pass
        else:
            raise AssertionError("a lower Stream-Seq was accepted")
        with handle.stream(live=False) as res:
            expect(res.read_json(), [{"n": 1}], "only the first append")


@check
def an_idempotent_producer_retry_is_written_once():
    u = url("producer")
    seq = {"next": 0}
    headers = {
        "Producer-Id": "py-1",
        "Producer-Epoch": "0",
        "Producer-Seq": lambda: str(seq["next"]),
    }
    with DurableStream.create(u, content_type=JSON, batching=False) as created:
        created.append({"n": "plain"})
    with DurableStream(u, content_type=JSON, headers=headers, batching=False) as handle:
        handle.append({"n": 0})
        handle.append({"n": 0})  # a retry of seq 0: a duplicate
        seq["next"] = 1
        handle.append({"n": 1})
        with handle.stream(live=False) as res:
            expect([i["n"] for i in res.read_json()], ["plain", 0, 1], "one copy per seq")


@check
def head_and_delete():
    u = url("head")
    with DurableStream.create(u, content_type=JSON, batching=False) as handle:
        handle.append({"n": 1})
        head = handle.head()
        expect(head.exists if hasattr(head, "exists") else True, True, "head")
        handle.delete()
    try:
        with stream(u, live=False) as res:
            res.read_json()
    except Exception:
        return
    raise AssertionError("a deleted stream was read")


passed = failed = 0
for fn in CHECKS:
    try:
        fn()
        passed += 1
        print(f"ok    {fn.__name__}")
    except Exception:
        failed += 1
        print(f"FAIL  {fn.__name__}")
        traceback.print_exc()
print(f"python client ({LABEL}): {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
