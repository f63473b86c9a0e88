"""An outside client of macpd's protocol-mode sessions on /macp/ws
(JSON-RPC 2.0 session/resume, session/end), using the Python `websockets`
library (Debian python3-websockets).

usage: ws_resume_client.py WS_URL TOKEN SESSION_ID CUT TOTAL

Calls an unknown method, then session/resume from the start and reads
envelope notifications up to sessionEventId CUT, drops the connection,
opens a new one, resumes with lastSessionEventId = CUT and reads up to
TOTAL, then sends session/end. Prints one JSON line per message received.
"""
import asyncio
import json
import sys

import websockets


async def rpc(ws, id_, method, params):
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}))


async def read_until(ws, upto):
    while True:
        msg = json.loads(await ws.recv())
        print(json.dumps(msg), flush=True)
        if msg.get("method") == "notifications/macp/envelope" and msg["params"]["sessionEventId"] >= upto:
            return


async def main(url, token, sid, cut, total):
    hdr = {"Authorization": "Bearer " + token}
    async with websockets.connect(url, extra_headers=hdr) as ws:
        await rpc(ws, 1, "session/nosuchmethod", {})
        print(json.dumps(json.loads(await ws.recv())), flush=True)
        await rpc(ws, 2, "session/resume", {"sessionId": sid, "lastSessionEventId": 0})
        await read_until(ws, cut)
    # The connection is gone; resume on a new one from the last event seen.
    async with websockets.connect(url, extra_headers=hdr) as ws:
        await rpc(ws, 3, "session/resume", {"sessionId": sid, "lastSessionEventId": cut})
        await read_until(ws, total)
        await rpc(ws, 4, "session/end", {"sessionId": sid})
        while True:
            msg = json.loads(await ws.recv())
            print(json.dumps(msg), flush=True)
            if msg.get("id") == 4:
                return


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
