"""A local OpenTelemetry collector for the tests: it takes OTLP/HTTP traces and keeps their spans."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class Receiver:
    """The least OTLP/HTTP traces receiver: POST /v1/traces, protobuf; every span kept, with its service."""

    def __init__(self):
        self.spans, self.lock = [], threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    for resource in request.resource_spans:
                        service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
                        for scope in resource.scope_spans:
                            receiver.spans.extend((service, span) for span in scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, test, timeout=20):
        """The spans (service, span) for which test(span) holds, once there is one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [(service, span) for service, span in self.spans if test(span)]
            if found:
                return found
            time.sleep(0.05)
        with self.lock:
            names = sorted({span.name for _, span in self.spans})
        raise AssertionError(f"no such span within {timeout} s; received: {names}")


def attributes(span):
    def value(v):
        return v.string_value or v.int_value or v.bool_value

    return {a.key: value(a.value) for a in span.attributes}
