"""The official Python SDK's HttpTransportAdapter (macp_sdk.agent.transports,
unmodified) against macpd's polling feed GET /sessions/{id}/events?after=N.

Run by scripts/python-sdk-http-it.sh (MACP_HTTP_BASE = the macpd HTTP
listener, dev identities). A Decision session is started and driven over
macpd's HTTP/JSON API while the adapter polls as a participant; the adapter
must yield every accepted envelope exactly once, in order, with seq = the
envelope's sequence number, and a payload equal to the SDK's own decoding
(ProtoRegistry.decode_known_payload) of the stored bytes, which are read
back over the SSE feed.
"""
import base64
import json
import os
import threading
import time
import urllib.request
import uuid

from macp_sdk.agent.transports import HttpTransportAdapter
from macp_sdk.proto_registry import ProtoRegistry

BASE = os.environ.get("MACP_HTTP_BASE", "http://127.0.0.1:50562")
MODE = "macp.mode.decision.v1"


def call(path, agent, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method="POST" if body is not None else "GET",
                                 headers={"Authorization": "Bearer " + agent, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def envelope(sid, mtype, payload):
    return {"macp_version": "1.0", "mode": MODE, "message_type": mtype, "message_id": str(uuid.uuid4()),
            "session_id": sid, "payload": payload}


def test_http_transport_adapter_receives_every_envelope():
    sid = str(uuid.uuid4())
    start = envelope(sid, "SessionStart", {"intent": "pick a db", "participants": ["coord", "alice", "bob"],
                                          "mode_version": "1.0.0", "configuration_version": "cfg-1",
                                          "ttl_ms": 600000})
    assert json.loads(call("/macp/session/start", "coord", start))["ok"]

    adapter = HttpTransportAdapter(base_url=BASE, session_id=sid, participant_id="alice",
                                   poll_interval_ms=50, auth_token="alice")
    got = []

    def consume():
        for msg in adapter.start():
            got.append(msg)

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    sent = [("coord", envelope(sid, "Proposal", {"proposal_id": "p1", "option": "postgres", "rationale": "boring"})),
            ("alice", envelope(sid, "Evaluation", {"proposal_id": "p1", "recommendation": "APPROVE", "confidence": 0.75, "reason": "ok"})),
            ("bob", envelope(sid, "Objection", {"proposal_id": "p1", "reason": "ops", "severity": "low"})),
            ("alice", envelope(sid, "Vote", {"proposal_id": "p1", "vote": "APPROVE", "reason": "fine"}))]
    for agent, env in sent:
        time.sleep(0.1)  # some while the adapter polls, some batched
        assert json.loads(call("/macp/envelope", agent, env))["ok"], env
    commit = envelope(sid, "Commitment", {"commitment_id": "c1", "action": "decision.selected", "authority_scope": "team",
                                          "reason": "approved", "mode_version": "1.0.0",
                                          "configuration_version": "cfg-1", "outcome_positive": True})
    assert json.loads(call("/macp/envelope", "coord", commit))["ok"]
    deadline = time.time() + 20
    while len(got) < 6 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # nothing more may arrive
    adapter.stop()
    th.join(timeout=5)

    # The stored envelopes, over the SSE feed (terminal: replays and ends).
    stored = []
    for block in call(f"/macp/session/{sid}/events", "alice").split("\n\n"):
        lines = dict(l.split(": ", 1) for l in block.split("\n") if ": " in l and not l.startswith(":"))
        if "id" in lines and "event" not in lines:
            stored.append((int(lines["id"]), json.loads(lines["data"])))
    assert [s for s, _ in stored] == [1, 2, 3, 4, 5, 6]
    assert len(got) == 6, [(m.seq, m.message_type) for m in got]
    reg = ProtoRegistry()
    for msg, (seq, env) in zip(got, stored):
        assert msg.seq == seq
        assert msg.message_type == env["message_type"]
        assert msg.sender == env["sender"]
        want = reg.decode_known_payload(env["mode"], env["message_type"], base64.b64decode(env["payload"]))
        assert msg.payload == want, (seq, msg.payload, want)
    assert got[1].proposal_id == "p1" and got[4].proposal_id == "p1"
    assert [m.sender for m in got] == ["coord", "coord", "alice", "bob", "alice", "coord"]
