"""The Python voter of the polyglot example (examples/polyglot/README.md).

Written against the official MACP Python SDK (`pip install macp-sdk-python`,
imported as `macp_sdk`). It waits for the Decision session the Go
coordinator starts, follows it on a StreamSession subscription, votes on
every proposal it is shown (APPROVE for the databases it trusts, REJECT
otherwise), and exits 0 once the session's Commitment arrives, non-zero on
a refusal, a transport error or the timeout.

Environment (examples/polyglot/run.sh sets them):
  MACP_ADDR        runtime address (default 127.0.0.1:50051)
  MACP_SESSION_ID  the session to join (required)
  MACP_TOKEN       bearer token; with MACP_SENDER the identity it is bound to
  MACP_SENDER      this voter's participant id (default py-voter); without
                   MACP_TOKEN it is used as a dev identity
  VOTER_TIMEOUT    seconds before giving up (default 60)
"""

from __future__ import annotations

import os
import queue
import sys
import time

import grpc
from macp.modes.decision.v1 import decision_pb2
from macp_sdk import AuthConfig, DecisionSession, MacpClient

TRUSTED = {"postgres", "sqlite"}


def log(msg: str) -> None:
    print(f"py-voter: {msg}", flush=True)


def main() -> int:
    addr = os.environ.get("MACP_ADDR", "127.0.0.1:50051")
    session_id = os.environ["MACP_SESSION_ID"]
    sender = os.environ.get("MACP_SENDER", "py-voter")
    token = os.environ.get("MACP_TOKEN")
    deadline = time.monotonic() + float(os.environ.get("VOTER_TIMEOUT", "60"))

    auth = (
        AuthConfig.for_bearer(token, expected_sender=sender)
        if token
        else AuthConfig.for_dev_agent(sender)
    )
    # Plaintext for the local example; a real deployment uses TLS (the default).
    client = MacpClient(target=addr, allow_insecure=True, auth=auth)
    try:
        init = client.initialize(timeout=10)
        log(f"connected to {init.runtime_info.name} {init.runtime_info.version} as {sender}")

        # The coordinator may not have started the session yet.
        while True:
            try:
                client.get_session(session_id, timeout=5)
                break
            except grpc.RpcError as exc:
                if time.monotonic() > deadline:
                    log(f"session {session_id} never appeared: {exc.code()} {exc.details()}")
                    return 1
                time.sleep(0.1)

        session = DecisionSession(client, session_id=session_id, auth=auth)
        stream = client.open_stream()
        stream.on_inline_error(lambda err: log(f"inline stream error: {err}"))
        # Replays the session from its SessionStart, then follows it live.
        stream.send_subscribe(session_id)
        voted: set[str] = set()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log("timed out before the session resolved")
                return 1
            try:
                env = stream.read(timeout=remaining)
            except queue.Empty:
                continue
            if env is None:
                log("the stream ended before the session resolved")
                return 1
            if env.message_type == "Proposal":
                p = decision_pb2.ProposalPayload()
                p.ParseFromString(env.payload)
                if p.proposal_id in voted:
                    continue
                choice = "APPROVE" if p.option in TRUSTED else "REJECT"
                ack = session.vote(
                    p.proposal_id, choice, reason=f"python SDK voter: {p.option}"
                )
                voted.add(p.proposal_id)
                log(f"voted {choice} on {p.proposal_id} ({p.option}); accepted={ack.ok}")
            elif env.message_type == "Commitment":
                log(f"session resolved by {env.sender}; exiting")
                stream.close()
                return 0
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
