"""A TCP proxy the fault tests control: put it in front of PostgreSQL, then drop, refuse or slow its connections.

Run as a process (`python -m tests.chaos.proxy LISTEN_PORT UPSTREAM_HOST:PORT CONTROL_PORT`) and steer it
with one-line commands on the control port (`Proxy` below is the client):

    drop            reset every open connection (RST), as a crashed server or a cut network does
    refuse          reset open connections and stop listening: new connects get ECONNREFUSED
    accept          listen again
    delay MS        forward every chunk MS milliseconds late, in both directions
    normal          delay 0, and listening
    upstream H:P    send new connections to H:P and reset the open ones (an address that moves to a new primary)
    count           how many connections are open
"""

import asyncio
import contextlib
import socket
import struct
import sys
import time


class TcpProxy:
    def __init__(self, listen_port, upstream):
        self.listen_port, self.upstream = listen_port, upstream
        self.delay = 0.0
        self.server = None
        self.pairs = set()  # (client writer, upstream writer)

    async def start(self):
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", self.listen_port, reuse_address=True)

    async def accept(self, client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            reset(client_writer)
            return
        for writer in (client_writer, upstream_writer):
            writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = (client_writer, upstream_writer)
        self.pairs.add(pair)
        try:
            await asyncio.gather(
                self.pipe(client_reader, upstream_writer),
                self.pipe(upstream_reader, client_writer),
            )
        finally:
            self.pairs.discard(pair)
            for writer in pair:
                writer.close()

    async def pipe(self, reader, writer):
        queue = asyncio.Queue()

        async def forward():
            while True:
                due, data = await queue.get()
                if data is None:
                    break
                if (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        forwarding = asyncio.create_task(forward())
        try:
            while data := await reader.read(65536):
                await queue.put((time.monotonic() + self.delay, data))
        except OSError:
            pass
        finally:
            await queue.put((0, None))
            with contextlib.suppress(OSError):
                await forwarding
            if writer.can_write_eof():
                with contextlib.suppress(OSError):
                    writer.write_eof()

    def drop(self):
        for pair in list(self.pairs):
            for writer in pair:
                reset(writer)
        self.pairs.clear()

    async def command(self, line):
        verb, *args = line.split()
        if verb == "drop":
            self.drop()
        elif verb == "refuse":
            if self.server is not None:
                self.server.close()
                self.server = None
            self.drop()
        elif verb == "accept":
            if self.server is None:
                await self.start()
        elif verb == "delay":
            self.delay = int(args[0]) / 1000
        elif verb == "normal":
            self.delay = 0.0
            if self.server is None:
                await self.start()
        elif verb == "upstream":
            host, _, port = args[0].rpartition(":")
            self.upstream = (host, int(port))
            self.drop()
        elif verb == "count":
            return str(len(self.pairs))
        else:
            return f"unknown command {verb}"
        return "ok"

    async def control(self, reader, writer):
        while line := (await reader.readline()).decode().strip():
            writer.write((await self.command(line) + "\n").encode())
            await writer.drain()
        writer.close()


def reset(writer):
    """Close with RST, not FIN: the peer sees "connection reset", as when a host or a network dies."""
    sock = writer.transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def main(listen_port, upstream, control_port):
    proxy = TcpProxy(listen_port, upstream)
    await proxy.start()
    control = await asyncio.start_server(proxy.control, "127.0.0.1", control_port, reuse_address=True)
    print("ready", flush=True)
    async with control:
        await control.serve_forever()


class Proxy:
    """The control side: a running proxy process, steered over its control port."""

    def __init__(self, control_port):
        self.control_port = control_port

    def __call__(self, line):
        with socket.create_connection(("127.0.0.1", self.control_port), timeout=10) as conn:
            conn.sendall(line.encode() + b"\n")
            answer = conn.makefile().readline().strip()
        if answer.startswith("unknown"):
            raise ValueError(answer)
        return answer


if __name__ == "__main__":
    host, _, port = sys.argv[2].rpartition(":")
    asyncio.run(main(int(sys.argv[1]), (host, int(port)), int(sys.argv[3])))
