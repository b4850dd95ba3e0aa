#!/usr/bin/env python3
"""A webhook receiver for bench/run's event rounds: answers 200 to every
request at once, over kept-alive connections, and checks nothing (the
relay's records in the database say what was sent and when; verifying
signatures is the contract tests' work). Prints how many requests it took
when it stops.

Usage: bench/receiver.py PORT
"""

import asyncio
import signal
import sys

REPLY = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
taken = 0


async def serve(reader, writer):
    global taken
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            taken += 1
            writer.write(REPLY)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port):
    server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    print(f"receiver: {taken} requests", flush=True)


asyncio.run(main(int(sys.argv[1])))
