// An agent's Connect stream on the server, on either transport (a grpc-js call or a
// kctl-tunnel/1 LinkAgentCall): authenticate it (auth.ts), judge its claims (claims.ts), answer
// with the server's headers, hand it to the broker, and judge the agents again when the Nodes or
// the connected agents change. server.ts owns the listeners that deliver the streams.
import type { X509Certificate } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../../base/log.ts';
import {
  AgentAuthError,
  authenticateAgent,
  authenticateUpstreamStyle,
  brokerId,
  issuerOf,
  strayAgentId,
  type AgentIdentity,
} from './auth.ts';
import type { Broker } from './broker.ts';
import { canonicalIdentifier, type NodeDirectory } from '../../base/ownership.ts';
import { isTrusted, judgeClaims, judgeWithoutNodes, type ClaimVerdict } from './claims.ts';
import type { ServerMetrics } from './metrics.ts';
import type { ServerOptionsWithDefaults } from './options.ts';
import { AgentBackend, type AgentCall } from './tunnel.ts';
import { LINK_ALPN } from '../wire/link.ts';
import { LinkAgentCall } from '../wire/link-calls.ts';
import {
  FLOW_CONTROL_EXTENSION,
  META,
  NODE_NAME_EXTENSION,
  newRandom,
  offersExtension,
  packets,
  parseIdentifiers,
  type AgentIdentifiers,
  type Packet,
} from '../wire/protocol.ts';
import { messageOf } from '../../base/errors.ts';

/** The kctl extensions this server agrees to when an agent offers them. */
const KCTL_EXTENSIONS = [FLOW_CONTROL_EXTENSION, NODE_NAME_EXTENSION];

/**
 * An older stream of a reconnecting agent silent this long is suspected dead. A kctl agent pings
 * after 5 s of silence from the server (checked every 2.5 s), so a live stream is rarely silent
 * longer than that for long; 3 s catches a stream cut by a partition without ever reaching past it.
 */
const STALE_STREAM_MS = 3_000;

const sameClaims = (a: ClaimVerdict, b: ClaimVerdict): boolean => JSON.stringify(a) === JSON.stringify(b);

/** What the agent streams of one server share with it. */
export interface AgentStreamsContext {
  readonly options: ServerOptionsWithDefaults;
  /** The cluster CAs node certificates are checked against, as trusted now (none: upstream's rules). */
  cas(): readonly X509Certificate[] | undefined;
  readonly serverId: string;
  serverCount(): number;
  readonly broker: Broker;
  readonly metrics: ServerMetrics;
  readonly log: Logger;
  /** The stream's connection authenticated: it leaves the agent port's pre-auth bounds. */
  authenticated(peer: string): void;
}

export class AgentStreams {
  constructor(private readonly c: AgentStreamsContext) {}

  /** One Connect stream, on either transport, from its metadata to its end. */
  async connect(call: AgentCall): Promise<void> {
    const gauge = this.c.metrics.grpcConnections.labels({ service_method: 'Connect' });
    gauge.inc();
    let counted = true;
    const uncount = (): void => {
      if (counted) gauge.dec();
      counted = false;
    };
    call.once('close', uncount);
    call.once('cancelled', uncount);
    const refuse = (code: grpc.status, message: string, agentId?: string): void => {
      this.c.log.warn({ agent: agentId, peer: call.getPeer() }, `agent refused: ${message}`);
      call.emit('error', { code, details: message });
    };

    const ids = call.metadata.get(META.agentId).map(String);
    const agentId = ids[0];
    if (ids.length !== 1 || !agentId)
      return refuse(
        grpc.status.INVALID_ARGUMENT,
        `metadata ${META.agentId} must be set exactly once (got ${ids.length})`,
      );
    // Upstream's rules (the standalone drop-in, or no CA to check node certificates against).
    const cas = this.c.options.agentAuth === 'upstream' ? undefined : this.c.cas();
    const upstreamStyle = cas === undefined;
    let identity;
    try {
      identity = cas
        ? await authenticateAgent(call, { cas, tokenReview: this.c.options.tokenReview })
        : await authenticateUpstreamStyle(call, { tokenReview: this.c.options.tokenReview });
    } catch (err) {
      if (err instanceof AgentAuthError) return refuse(err.code, err.message, agentId);
      return refuse(grpc.status.INTERNAL, `authentication failed: ${messageOf(err)}`, agentId);
    }
    if (call.cancelled) return;
    this.c.authenticated(call.getPeer()); // its connection leaves the pre-auth bounds

    // An agent is who authenticated, not what it calls itself: its id can never shadow another's stream.
    const id = brokerId(identity, agentId, upstreamStyle);
    const offered = call.metadata.get(META.extensions);
    const extensions = this.c.options.extensions ? KCTL_EXTENSIONS.filter((e) => offersExtension(offered, e)) : [];
    const claimed = parseIdentifiers(call.metadata.get(META.agentIdentifiers).map(String)[0] ?? '');
    const verdict = this.judge(identity, claimed, undefined);
    const md = new grpc.Metadata();
    md.set(META.serverId, this.c.serverId);
    md.set(META.serverCount, String(this.c.serverCount()));
    if (extensions.length > 0) md.set(META.extensions, extensions.join(','));
    call.sendMetadata(md);

    const backend = new AgentBackend(
      id,
      agentId,
      claimed,
      verdict,
      identity,
      extensions,
      call,
      (a) => this.c.broker.agentDrained(a),
      (type) => this.c.metrics.packet('to_agent', type),
    );
    this.c.broker.addAgent(backend);
    this.probeOlderStreams(backend);
    this.warnDropped(backend);
    this.rejudge('trusted'); // a Node's own agent wins its addresses from trusted agents
    this.c.log.info(
      {
        agent: id,
        agentIdClaimed: strayAgentId(identity, agentId),
        node: identity.node,
        user: identity.user,
        auth: identity.method,
        identifiers: verdict.accepted,
        extensions,
        transport: call instanceof LinkAgentCall ? LINK_ALPN : 'grpc',
        peer: call.getPeer(),
      },
      'agent connected',
    );

    call.on('data', (p: Packet) => {
      backend.heard();
      this.c.metrics.packet('from_agent', p.type);
      this.c.broker.fromAgent(backend, p);
    });
    const gone = (why: string): void => {
      if (backend.gone) return;
      this.c.broker.removeAgent(backend, why);
      this.c.log.info({ agent: id, why }, 'agent disconnected');
      this.rejudge('trusted');
    };
    call.on('end', () => {
      gone('agent closed the stream');
      call.end();
    });
    call.on('cancelled', () => gone('stream cancelled'));
    call.on('error', (err: Error & { code?: number }) => {
      this.c.metrics.streamFailed('from_agent', err.code);
      gone(err.message);
    });
    call.on('close', () => gone('stream closed'));
  }

  /**
   * The trusted CAs changed (a CA rotation's phase): a node agent whose certificate no CA of the
   * new bundle issued is cut off now, with its tunnels; its next Connect is refused, on a new
   * connection by TLS and on an open one by the second look (auth.ts).
   */
  trustChanged(cas: readonly X509Certificate[]): void {
    for (const a of [...this.c.broker.agents]) {
      const cert = a.identity.certificate;
      if (!cert || issuerOf(cert, cas)) continue;
      const why = `its client certificate's CA (${cert.issuer.replace(/\n/g, ',')}) is no longer trusted`;
      this.c.log.warn({ agent: a.id, node: a.identity.node }, `agent ${a.id}: stream closed: ${why}`);
      this.c.broker.removeAgent(a, why);
      a.end();
    }
  }

  /**
   * An agent that reconnects after a partition often does so before this side noticed its old
   * stream die: that stream would keep getting its dials (routing prefers the oldest) until the
   * keepalive drops it. Older streams of the same agent that have been silent a while are pinged
   * and avoided until they answer. kctl agents only: they ping every few seconds, so silence means
   * something; an idle upstream agent is silent for its whole 1 h keepalive.
   */
  private probeOlderStreams(fresh: AgentBackend): void {
    for (const old of this.c.broker.agents) {
      if (old === fresh || old.id !== fresh.id || old.gone || !old.flowControl || old.silentMs < STALE_STREAM_MS)
        continue;
      old.suspect = true;
      old.send(packets.ping(newRandom()));
      this.c.log.info(
        { agent: old.id, silentSeconds: Math.round(old.silentMs / 1000) },
        'agent reconnected; its older stream is silent, pinged and avoided until it answers',
      );
    }
  }

  private judge(identity: AgentIdentity, claimed: AgentIdentifiers, self: AgentBackend | undefined): ClaimVerdict {
    const nodes = this.c.options.nodes;
    if (!nodes) return judgeWithoutNodes(identity, claimed);
    const trusted = isTrusted(identity, this.c.options.trustedAgents);
    return judgeClaims(identity, claimed, nodes, trusted, (value) => this.ownerAgent(value, self, nodes));
  }

  /** A connected agent of a Node that reports `value`, holding it as an accepted identifier. */
  private ownerAgent(value: string, self: AgentBackend | undefined, nodes: NodeDirectory): string | undefined {
    const owners = nodes.owners(value);
    const v = canonicalIdentifier(value);
    for (const b of this.c.broker.agents) {
      if (
        b !== self &&
        b.identity.method === 'certificate' &&
        owners.includes(b.identity.node ?? '') &&
        b.namesExactly(v)
      )
        return b.id;
    }
    return undefined;
  }

  /** One warn line per agent whose claims were cut, naming agent, node and each dropped claim. */
  private warnDropped(a: AgentBackend): void {
    if (a.dropped.length === 0 || (this.c.options.nodes && !this.c.options.nodes.synced)) return;
    const dropped = a.dropped.map((d) => `${d.claim} (${d.reason})`);
    this.c.log.warn(
      { agent: a.id, node: a.identity.node, user: a.identity.user, dropped },
      `agent ${a.id}: dropped claims ${dropped.join('; ')}`,
    );
  }

  /**
   * Nodes changed (all agents), or an agent came or went (trusted agents: only their verdicts
   * depend on other agents). Routing of new dials follows; open tunnels stay.
   */
  rejudge(which: 'all' | 'trusted'): void {
    if (!this.c.options.nodes) return;
    for (const a of this.c.broker.agents) {
      if (which === 'trusted' && !isTrusted(a.identity, this.c.options.trustedAgents)) continue;
      const verdict = this.judge(a.identity, a.claimed, a);
      if (sameClaims(verdict, { accepted: a.identifiers, dropped: a.dropped })) continue;
      a.rejudged(verdict);
      this.c.log.info(
        { agent: a.id, node: a.identity.node, accepted: verdict.accepted },
        'agent claims follow a Node change',
      );
      this.warnDropped(a);
    }
  }
}
