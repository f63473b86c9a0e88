/**
 * The TypeScript voter of the polyglot example (examples/polyglot/README.md).
 *
 * Written against the official MACP TypeScript SDK (`npm install
 * macp-sdk-typescript`). It waits for the Decision session the Go
 * coordinator starts, follows it on a StreamSession subscription, votes on
 * every proposal it is shown (APPROVE for the databases it trusts, REJECT
 * otherwise), and exits 0 once the session's Commitment arrives, non-zero on
 * a refusal, a transport error or the timeout.
 *
 * Environment (examples/polyglot/run.sh sets them):
 *   MACP_ADDR        runtime address (default 127.0.0.1:50051)
 *   MACP_SESSION_ID  the session to join (required)
 *   MACP_TOKEN       bearer token; with MACP_SENDER the identity it is bound to
 *   MACP_SENDER      this voter's participant id (default ts-voter); without
 *                    MACP_TOKEN it is used as a dev identity
 *   VOTER_TIMEOUT    seconds before giving up (default 60)
 */
import { Auth, DecisionSession, MacpClient, MacpTimeoutError } from 'macp-sdk-typescript';

const TRUSTED = new Set(['postgres', 'mysql']);

function log(msg: string): void {
  console.log(`ts-voter: ${msg}`);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function main(): Promise<number> {
  const address = process.env.MACP_ADDR ?? '127.0.0.1:50051';
  const sessionId = process.env.MACP_SESSION_ID;
  if (!sessionId) throw new Error('MACP_SESSION_ID is required');
  const sender = process.env.MACP_SENDER ?? 'ts-voter';
  const token = process.env.MACP_TOKEN;
  const deadline = Date.now() + 1000 * Number(process.env.VOTER_TIMEOUT ?? '60');

  const auth = token ? Auth.bearer(token, { expectedSender: sender }) : Auth.devAgent(sender);
  // Plaintext for the local example; a real deployment uses TLS (the default).
  const client = new MacpClient({ address, secure: false, allowInsecure: true, auth });
  try {
    const init = await client.initialize(10_000);
    log(`connected to ${init.runtimeInfo?.name} ${init.runtimeInfo?.version} as ${sender}`);

    // The coordinator may not have started the session yet.
    for (;;) {
      try {
        await client.getSession(sessionId, { deadlineMs: 5_000 });
        break;
      } catch (err) {
        if (Date.now() > deadline) {
          log(`session ${sessionId} never appeared: ${(err as Error).message}`);
          return 1;
        }
        await sleep(100);
      }
    }

    const session = new DecisionSession(client, { sessionId, auth });
    const stream = client.openStream();
    stream.onInlineError((err) => log(`inline stream error: ${err.code} ${err.message}`));
    // Replays the session from its SessionStart, then follows it live.
    await stream.sendSubscribe(sessionId);
    const voted = new Set<string>();
    try {
      for (;;) {
        const remaining = deadline - Date.now();
        if (remaining <= 0) {
          log('timed out before the session resolved');
          return 1;
        }
        let env;
        try {
          env = await stream.read(remaining);
        } catch (err) {
          if (err instanceof MacpTimeoutError) continue;
          throw err;
        }
        if (env === null) {
          log('the stream ended before the session resolved');
          return 1;
        }
        if (env.messageType === 'Proposal') {
          const p = client.protoRegistry.decodeKnownPayload(env.mode, 'Proposal', env.payload) ?? {};
          const proposalId = String(p.proposalId ?? '');
          const option = String(p.option ?? '');
          if (voted.has(proposalId)) continue;
          const vote = TRUSTED.has(option) ? 'APPROVE' : 'REJECT';
          const ack = await session.vote({ proposalId, vote, reason: `typescript SDK voter: ${option}` });
          voted.add(proposalId);
          log(`voted ${vote} on ${proposalId} (${option}); accepted=${ack.ok}`);
        } else if (env.messageType === 'Commitment') {
          log(`session resolved by ${env.sender}; exiting`);
          return 0;
        }
      }
    } finally {
      stream.close();
    }
  } finally {
    client.close();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    console.error('ts-voter FAILED:', err);
    process.exitCode = 1;
  },
);
