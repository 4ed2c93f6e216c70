#!/usr/bin/env python3
"""A tiny OTLP/HTTP (protobuf) trace receiver that prints each trace as an indented span tree.

For looking at what the service exports without Jaeger (no Docker here). Standard library only:
it decodes the few protobuf fields of ExportTraceServiceRequest it needs by hand.

    python3 eng/otlp-tree.py [--port 4318] [--filter allocator.allocate]

Point the service at it: OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318
OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf. It prints a trace once no span of it arrived for two
seconds; --filter prints only traces with a span of that name.
"""
import argparse
import http.server
import struct
import threading
import time
from collections import defaultdict

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def fields(buf):
    """Yields (field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            length, i = varint(buf, i)
            value, i = buf[i:i + length], i + length
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def varint(buf, i):
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def any_value(buf):
    for number, wire, value in fields(buf):
        if number == 1:
            return value.decode()
        if number == 2:
            return bool(value)
        if number == 3:
            return value if value < 1 << 63 else value - (1 << 64)
        if number == 4:
            return struct.unpack("<d", value)[0]
    return None


def spans(request):
    for n1, _, resource_spans in fields(request):
        if n1 != 1:
            continue
        for n2, _, scope_spans in fields(resource_spans):
            if n2 != 2:
                continue
            scope = ""
            for n3, _, value in fields(scope_spans):
                if n3 == 1:
                    scope = next((v.decode() for n, _, v in fields(value) if n == 1), "")
                elif n3 == 2:
                    span = {"scope": scope, "attrs": {}, "parent": b""}
                    for n4, _, v in fields(value):
                        if n4 == 1:
                            span["trace"] = v.hex()
                        elif n4 == 2:
                            span["id"] = v
                        elif n4 == 4:
                            span["parent"] = v
                        elif n4 == 5:
                            span["name"] = v.decode()
                        elif n4 == 6:
                            span["kind"] = KINDS.get(v, str(v))
                        elif n4 == 7:
                            span["start"] = struct.unpack("<Q", v)[0]
                        elif n4 == 8:
                            span["end"] = struct.unpack("<Q", v)[0]
                        elif n4 == 9:
                            kv = dict((n, x) for n, _, x in fields(v))
                            span["attrs"][kv[1].decode()] = any_value(kv.get(2, b""))
                    yield span


class Traces:
    def __init__(self, name_filter):
        self.by_trace = defaultdict(list)
        self.last_seen = {}
        self.name_filter = name_filter
        self.lock = threading.Lock()

    def add(self, span):
        with self.lock:
            self.by_trace[span["trace"]].append(span)
            self.last_seen[span["trace"]] = time.monotonic()

    def flush(self):
        while True:
            time.sleep(0.5)
            with self.lock:
                done = [t for t, at in self.last_seen.items() if time.monotonic() - at > 2]
                ready = [(t, self.by_trace.pop(t)) for t in done]
                for t in done:
                    del self.last_seen[t]
            for trace, items in ready:
                if self.name_filter and not any(s.get("name") == self.name_filter for s in items):
                    continue
                print_tree(trace, items)


def print_tree(trace, items):
    ids = {s["id"] for s in items}
    children = defaultdict(list)
    for s in items:
        children[s["parent"] if s["parent"] in ids else b""].append(s)
    print(f"trace {trace} ({len(items)} spans)")

    def walk(parent, depth):
        for s in sorted(children[parent], key=lambda x: x.get("start", 0)):
            ms = (s.get("end", 0) - s.get("start", 0)) / 1e6
            keep = {k: v for k, v in s["attrs"].items() if k.startswith(("allocator.", "http.request.method", "http.route", "http.response.status_code", "db.", "rpc."))}
            attrs = " ".join(f"{k}={v}" for k, v in sorted(keep.items()))
            print(f"{'  ' * depth}{s.get('name')} [{s['scope']}, {s.get('kind')}] {ms:.2f} ms {attrs}".rstrip())
            walk(s["id"], depth + 1)

    walk(b"", 1)
    print(flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4318)
    parser.add_argument("--filter", default=None, help="only traces with a span of this name")
    args = parser.parse_args()
    traces = Traces(args.filter)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/v1/traces":
                for span in spans(body):
                    traces.add(span)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_):
            pass

    threading.Thread(target=traces.flush, daemon=True).start()
    print(f"otlp-tree: listening on http://127.0.0.1:{args.port} (OTLP/HTTP protobuf)", flush=True)
    http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
