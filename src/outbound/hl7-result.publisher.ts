import type { ConnectionOptions } from 'node:tls';
import { HL7_ERROR_CONDITIONS, type Hl7ErrorCondition } from '../hl7/hl7-ack.builder';
import { parseHl7 } from '../hl7/hl7-message';
import { MllpClient } from '../hl7/mllp-client';
import { buildOrmStatus, buildOru, type Hl7ResultSettings } from '../mappings/hl7-result.mapping';
import { DESTINATIONS } from './outbound.settings';
import type { LoadedPublication } from './publication.loader';
import { type DeliveryResult, exchangeText, type OutboxItem, type Publisher } from './publisher';

export interface Hl7PublisherOptions {
  host: string;
  port: number;
  /** MLLP over TLS with these options (ca, servername…). */
  tls?: ConnectionOptions;
  responseTimeoutMs: number;
  settings: Hl7ResultSettings;
  /** Connections kept to the RIS (one message in flight on each). */
  connections: number;
  clock?: () => Date;
}

/**
 * ORU^R01 (and ORM^O01 status messages) to the RIS over MLLP with our MllpClient (one message
 * in flight per connection, reply timeout, connection dropped after a timeout so a late ACK is
 * never taken for the next message). The ACK is matched on MSA-2 = our MSH-10; AA/CA is
 * delivered, AE/CE and timeouts are retried (an AE/CE whose ERR names only content or format
 * conditions is a dead letter at once), AR/CR is a dead letter unless its ERR names a
 * condition that passes, 206 or 207 (HL7 v2.5.1 2.9.2, tables 0008 and 0357). A resend keeps the MSH-10 of the first try, so the RIS can spot a duplicate.
 */
export class Hl7ResultPublisher implements Publisher {
  readonly destination = DESTINATIONS.hl7;
  private readonly clients: MllpClient[];
  private next = 0;

  constructor(private readonly options: Hl7PublisherOptions) {
    this.clients = Array.from(
      { length: Math.max(1, options.connections) },
      () =>
        new MllpClient({
          host: options.host,
          port: options.port,
          responseTimeoutMs: options.responseTimeoutMs,
          ...(options.tls ? { tls: options.tls } : {}),
          connectTimeoutMs: Math.min(10_000, options.responseTimeoutMs),
        }),
    );
  }

  async deliver(item: OutboxItem, loaded: LoadedPublication): Promise<DeliveryResult> {
    const now = (this.options.clock ?? (() => new Date()))();
    const controlId = `IAA${item.id}`;
    let built;
    if (item.kind === 'hl7-oru') {
      built = buildOru(loaded.input, loaded.original, this.options.settings, controlId, now);
    } else if (item.kind === 'hl7-orm-status') {
      built = buildOrmStatus(loaded.input, loaded.original, this.options.settings, controlId, now);
    } else {
      return { outcome: 'dead', answer: `unknown kind ${item.kind}`, detail: {} };
    }
    const label = item.kind === 'hl7-oru' ? 'ORU^R01' : 'ORM^O01';
    const result = await this.exchange(built, label, controlId);
    // A value written shorter than the order holds it (a name part past its XPN component) is
    // recorded with the attempt (outbound.attempt), as a quirk of what went out.
    const quirks = built.cuts.map((detail) => ({ code: 'value-cut-to-type', detail }));
    // The message as sent and the RIS's answer as received (outbox.last_exchange).
    return {
      ...result,
      ...(quirks.length > 0 ? { detail: { ...result.detail, quirks } } : {}),
      sent: exchangeText('application/hl7-v2', built.text),
    };
  }

  private async exchange(
    built: { bytes: Buffer; version: string },
    label: string,
    controlId: string,
  ): Promise<DeliveryResult> {
    const client = this.clients[this.next++ % this.clients.length]!;
    const started = Date.now();
    // Replies naming another message (a commit ACK's application ACK, a repeated ACK, a stale
    // one) are set aside and the wait goes on: before, the first of them was taken as this
    // message's answer, it was resent on every attempt (each taken by the RIS) and died.
    const ignored: string[] = [];
    let reply: Buffer;
    try {
      reply = await client.send(built.bytes, {
        isAnswer: (r) => answersMessage(r, controlId),
        onIgnored: (r) => ignored.push(acknowledgedIdOf(r) ?? '(none)'),
      });
    } catch (error) {
      return {
        outcome: 'retry',
        answer: `${label} not acknowledged: ${(error as { code?: string }).code ?? (error as Error).name}${ignored.length > 0 ? `; the RIS's ${ignored.length} replies named other messages in MSA-2, not ${controlId}` : ''}`,
        detail: {
          controlId,
          version: built.version,
          error: (error as Error).message.slice(0, 200),
          ...ignoredDetail(ignored),
        },
      };
    }
    const response = exchangeText('application/hl7-v2', reply.toString('latin1'));
    let ack;
    try {
      ack = parseHl7(reply);
    } catch {
      return {
        outcome: 'retry',
        answer: `${label}: the reply is not HL7`,
        detail: { controlId },
        response,
      };
    }
    if (ack.segment('MSA')?.value(2) !== controlId) {
      // Not the answer to this message: out of step; the next try starts afresh.
      await client.close().catch(() => undefined);
    }
    const result = this.classify(ack, label, controlId, built.version, started);
    return { ...result, detail: { ...result.detail, ...ignoredDetail(ignored) }, response };
  }

  private classify(
    ack: ReturnType<typeof parseHl7>,
    label: string,
    controlId: string,
    version: string,
    started: number,
  ): DeliveryResult {
    const msa = ack.segment('MSA');
    const code = msa?.value(1);
    const answered = msa?.value(2);
    const err = ack.segment('ERR');
    const detail = {
      controlId,
      version,
      ackCode: code === undefined ? null : bounded(code, ACK_ID_MAX),
      ackControlId:
        ack.controlId === undefined ? ack.controlId : bounded(ack.controlId, ACK_ID_MAX),
      acknowledgedId: answered === undefined ? null : bounded(answered, ACK_ID_MAX),
      ...(err ? { err: err.fields.slice(1).join('|').slice(0, 300) } : {}),
      ...(msa?.value(3) ? { text: bounded(msa.value(3)!, ACK_TEXT_MAX) } : {}),
      latencyMs: Date.now() - started,
    };
    if (answered !== controlId) {
      return { outcome: 'retry', answer: `${label}: ACK for another message (MSA-2)`, detail };
    }
    switch (code) {
      case 'AA':
      case 'CA':
        return { outcome: 'delivered', answer: `${label} ${code}`, detail };
      case 'AE':
      case 'CE': {
        // An error the sender may correct and resend (table 0008): a RIS that is busy, or one
        // that cannot take this message as it is. When every condition its ERR names is one of
        // content or format (table 0357: 100–103, 200–203), the same bytes are refused the same
        // way on every retry; before, they were retried to the last attempt, the analyst seeing
        // "retrying" for hours instead of what the RIS said.
        const conditions = errorConditions(ack);
        if (conditions.length > 0 && conditions.every((c) => CONTENT_CONDITIONS.includes(c)))
          return {
            outcome: 'dead',
            answer: `${label} ${code}: the RIS cannot take this message (ERR ${conditions.map((c) => `${c} ${HL7_ERROR_CONDITIONS[c as Hl7ErrorCondition]}`).join(', ')})`,
            detail,
          };
        return { outcome: 'retry', answer: `${label} ${code}`, detail };
      }
      case 'AR':
      case 'CR': {
        // Table 0008: AR is a refusal "for a reason unrelated to content or format", which
        // the sender decides whether to resend; ERR naming table 0357's 206 (record locked)
        // or 207 (internal error) is a RIS that is down or busy, which a resend gets past.
        // Before, such a refusal was a dead letter at once, the result never sent again.
        const passing = errorConditions(ack).filter((c) => TRANSIENT_CONDITIONS.includes(c));
        if (passing.length > 0)
          return {
            outcome: 'retry',
            answer: `${label} ${code}: refused by the RIS for now (ERR ${passing.map((c) => `${c} ${HL7_ERROR_CONDITIONS[c as Hl7ErrorCondition]}`).join(', ')})`,
            detail,
          };
        return { outcome: 'dead', answer: `${label} ${code}: refused by the RIS`, detail };
      }
      default:
        return {
          outcome: 'retry',
          answer: `${label}: unknown ACK code ${code === undefined ? '(none)' : bounded(code, ACK_ID_MAX)}`,
          detail,
        };
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.clients.map((c) => c.close().catch(() => undefined)));
  }
}

/**
 * The most of a RIS's ACK values recorded with an attempt: its codes and ids (MSA-1, MSA-2,
 * MSH-10: 199 at most as HL7 sizes an ID, ST or EI) and MSA-3's text. An engine answering with a
 * Java stack trace in MSA-3, or garbage where MSA-1's code belongs, had all of it in the audit
 * detail, the code in the attempt's summary, last_error and the dead letter's reason (what
 * ALERT_WEBHOOK_URL is told too): 100 KB at every attempt. The whole ACK stays in the exchange
 * record, which bounds it (EXCHANGE_TEXT_LIMIT).
 */
const ACK_ID_MAX = 199;
const ACK_TEXT_MAX = 1_000;

/** `value` within `max` characters, saying how long it was when it is cut. */
function bounded(value: string, max: number): string {
  return value.length > max ? `${value.slice(0, max)}… (${value.length} characters)` : value;
}

/** Table 0357 conditions a resend can get past: 206 record locked, 207 internal error. */
const TRANSIENT_CONDITIONS: readonly number[] = [206, 207];

/**
 * Table 0357 conditions of content or format that a resend of the same message meets again:
 * segment sequence, required field missing, data type, table value; unsupported message type,
 * event, processing id, version. Not 204/205 (a key the RIS does not know yet, or a resend it
 * already has), which may pass or mean delivered.
 */
const CONTENT_CONDITIONS: readonly number[] = [100, 101, 102, 103, 200, 201, 202, 203];

/**
 * The table 0357 codes of an ACK's ERR segments: ERR-3.1 (v2.5+), or ERR-1.4.1 (the ELD of
 * v2.3/2.4, code in its fourth component).
 */
function errorConditions(ack: ReturnType<typeof parseHl7>): number[] {
  return ack.segmentsById('ERR').flatMap((err) => {
    const code = err.value(3) ?? err.value(1, 1, 4, 1);
    return code !== undefined && /^\d{3}$/.test(code.trim()) ? [Number(code.trim())] : [];
  });
}

/** MSA-2 of a reply, when it is HL7 with an MSA. */
function acknowledgedIdOf(reply: Buffer): string | undefined {
  try {
    return parseHl7(reply).segment('MSA')?.value(2);
  } catch {
    return undefined;
  }
}

/**
 * Whether a reply is this message's answer: everything but an ACK naming another control id
 * in MSA-2 (HL7 v2.5.1 2.14.8.2); a reply that is not HL7 or has no MSA-2 is classified as
 * the answer (retried, with what it was).
 */
function answersMessage(reply: Buffer, controlId: string): boolean {
  const answered = acknowledgedIdOf(reply);
  return answered === undefined || answered === '' || answered === controlId;
}

function ignoredDetail(ignored: string[]): Record<string, unknown> {
  // control ids are ours (IAA…) or the RIS's: no PHI; a few are enough to see the pattern
  return ignored.length > 0
    ? {
        ignoredReplies: ignored.length,
        ignoredAckIds: ignored.slice(0, 5).map((i) => i.slice(0, 40)),
      }
    : {};
}
