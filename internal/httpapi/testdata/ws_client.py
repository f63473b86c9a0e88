"""An outside WebSocket client for macpd's /macp/ws (JSON-RPC 2.0), using
the Python `websockets` library (Debian python3-websockets).

usage: ws_client.py WS_URL TOKEN SESSION_ID AFTER

Subscribes to SESSION_ID after AFTER, sends one Proposal, and prints one
JSON line per message received until the session's end notification:
the subscribe response, every envelope notification, the send's ack.
Then opens a connection without credentials and prints its close code.
"""
import asyncio
import json
import sys

import websockets


async def main(url, token, sid, after):
    async with websockets.connect(url, extra_headers={"Authorization": "Bearer " + token}) as ws:
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "macp/subscribe",
                                  "params": {"sessionId": sid, "afterSequence": after}}))
        sent = False
        while True:
            msg = json.loads(await ws.recv())
            print(json.dumps(msg), flush=True)
            if msg.get("id") == 1 and not sent:
                sent = True
                env = {"macp_version": "1.0", "mode": "macp.mode.decision.v1", "message_type": "Proposal",
                       "message_id": "py-ws-1", "session_id": sid,
                       "payload": {"proposal_id": "py", "option": "from python"}}
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "macp/send", "params": {"envelope": env}}))
            if msg.get("method") == "notifications/macp/end":
                break
    try:
        async with websockets.connect(url) as ws:
            await ws.recv()
    except websockets.exceptions.ConnectionClosed as e:
        print(json.dumps({"close_code": e.code, "close_reason": e.reason}), flush=True)


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
