import { createServer, type IncomingMessage, type Server } from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { OperationOutcomeError, validateResource } from '@medplum/core';
import type { Resource } from '@medplum/fhirtypes';
import { encodeMessage, formatHl7Timestamp } from '../../src/hl7/hl7-builder';
import { parseHl7, type Hl7Message } from '../../src/hl7/hl7-message';
import { MllpServer } from '../../src/hl7/mllp-server';
import { loadFhirDefinitions } from '../../src/fhir/fhir-validator';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

/**
 * RIS peers for the ORU tests: an MLLP receiver that answers each message with an ACK whose
 * code a script decides (AA, AE then AA, AR...), and one that drops the connection on every
 * message. Both record what they received.
 */
export interface TestRis {
  port: number;
  received: string[];
  /** The same messages as the bytes that came (decoded by MSH-18, they are what a RIS reads). */
  receivedBytes: Buffer[];
  close(): Promise<void>;
}

export async function startAckingRis(
  script: (n: number, controlId: string, message: string) => 'AA' | 'AE' | 'AR' = () => 'AA',
  tls?: { key: Buffer; cert: Buffer },
  /** A slow RIS: milliseconds to wait before answering message n (0: at once). */
  delayMs?: (n: number, message: string) => number,
  /** MSA-3 of a refusal (default `busy or refused`): what a RIS says about message n. */
  refusalText?: (n: number) => string,
): Promise<TestRis> {
  const received: string[] = [];
  const receivedBytes: Buffer[] = [];
  let n = 0;
  const server = new MllpServer({
    port: 0,
    host: '127.0.0.1',
    ...(tls ? { tls } : {}),
    handler: async (message) => {
      const text = message.toString('utf8');
      received.push(text);
      receivedBytes.push(Buffer.from(message));
      const inbound = parseHl7(message);
      n += 1;
      const wait = delayMs?.(n, text) ?? 0;
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      const code = script(n, inbound.controlId, text);
      return Buffer.from(
        encodeMessage([
          {
            id: 'MSH',
            fields: [
              'TESTRIS',
              'HOSP',
              inbound.msh.value(3),
              inbound.msh.value(4),
              formatHl7Timestamp(new Date()),
              undefined,
              ['ACK', inbound.messageType.trigger, 'ACK'],
              `ACK${n}`,
              'P',
              inbound.version,
            ],
          },
          {
            id: 'MSA',
            fields: [
              code,
              inbound.controlId,
              code === 'AA' ? undefined : (refusalText?.(n) ?? 'busy or refused'),
            ],
          },
          ...(code === 'AA'
            ? []
            : [
                {
                  id: 'ERR',
                  fields: [
                    undefined,
                    undefined,
                    // AE: a fault that may pass; AR: a refusal for good (the RIS knows no such
                    // order). An AR naming 206/207 is retried (table 0357: locked, internal error).
                    code === 'AR'
                      ? ['204', 'Unknown key identifier', 'HL70357']
                      : ['207', 'Application internal error', 'HL70357'],
                    'E',
                  ],
                },
              ]),
        ]),
        'utf8',
      );
    },
  });
  const { port } = await server.listen();
  return { port, received, receivedBytes, close: () => server.close(2000) };
}

export async function startDroppingRis(): Promise<TestRis> {
  const received: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('data', (chunk) => {
      received.push(chunk.toString('utf8'));
      socket.destroy();
    });
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    received,
    receivedBytes: [],
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * The EHR: the in-memory FHIR engine (test/helpers/fhir-server.ts) behind a front that does
 * what a production server's repository does on write: validate the resource against the R4
 * structure definitions and answer 400 with the OperationOutcome when it is invalid.
 */
export interface TestEhr {
  baseUrl: string;
  inner: TestFhirServer;
  rejected: number;
  /** When set, requests must carry `Authorization: Bearer <token>` (else 401). */
  requiredToken?: string;
  close(): Promise<void>;
  search<T extends Resource>(type: string, query: string): Promise<T[]>;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export async function startValidatingEhr(): Promise<TestEhr> {
  loadFhirDefinitions();
  const inner = await startTestFhirServer();
  const state: { rejected: number; requiredToken?: string } = { rejected: 0 };
  const server: Server = createServer((req, res) => {
    void (async () => {
      const body = await readBody(req);
      if (state.requiredToken && req.headers.authorization !== `Bearer ${state.requiredToken}`) {
        res.writeHead(401, { 'content-type': 'application/fhir+json' });
        res.end(
          JSON.stringify({
            resourceType: 'OperationOutcome',
            issue: [{ severity: 'error', code: 'login' }],
          }),
        );
        return;
      }
      if ((req.method === 'PUT' || req.method === 'POST') && body.length > 0) {
        try {
          validateResource(JSON.parse(body.toString('utf8')) as Resource);
        } catch (error) {
          state.rejected += 1;
          const outcome =
            error instanceof OperationOutcomeError
              ? error.outcome
              : {
                  resourceType: 'OperationOutcome',
                  issue: [
                    { severity: 'error', code: 'invalid', diagnostics: (error as Error).message },
                  ],
                };
          res.writeHead(400, { 'content-type': 'application/fhir+json' });
          res.end(JSON.stringify(outcome));
          return;
        }
      }
      const path = (req.url ?? '/').replace(/^\/fhir/, '');
      const method = req.method ?? 'GET';
      const answer = await fetch(`${inner.baseUrl}${path}`, {
        method,
        headers: { 'content-type': 'application/fhir+json', accept: 'application/fhir+json' },
        ...(body.length > 0 ? { body } : {}),
      });
      const text = Buffer.from(await answer.arrayBuffer());
      res.writeHead(answer.status, { 'content-type': 'application/fhir+json' });
      res.end(text);
    })().catch((error: unknown) => {
      res.writeHead(500);
      res.end(String(error));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/fhir`;
  return {
    baseUrl,
    inner,
    get rejected() {
      return state.rejected;
    },
    get requiredToken() {
      return state.requiredToken;
    },
    set requiredToken(v) {
      state.requiredToken = v;
    },
    async search<T extends Resource>(type: string, query: string): Promise<T[]> {
      const r = await fetch(`${inner.baseUrl}/${type}?${query}`);
      const bundle = (await r.json()) as { entry?: Array<{ resource: T }> };
      return (bundle.entry ?? []).map((e) => e.resource);
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await inner.close();
    },
  };
}

/**
 * An ACK as a RIS writes it (MSA-2 = the message's MSH-10, MSH-9 ACK^<trigger>^ACK), unframed;
 * its own MSH-10 names the code, so a commit ACK and an application ACK differ.
 */
export function risAck(inbound: Hl7Message, code = 'AA'): Buffer {
  return Buffer.from(
    encodeMessage([
      {
        id: 'MSH',
        fields: [
          'RADIS',
          'KLINIKUM',
          inbound.msh.value(3),
          inbound.msh.value(4),
          formatHl7Timestamp(new Date()),
          undefined,
          ['ACK', inbound.messageType.trigger, 'ACK'],
          `RIS-${code}-${inbound.controlId}`,
          'P',
          inbound.version,
        ],
      },
      { id: 'MSA', fields: [code, inbound.controlId] },
    ]),
    'latin1',
  );
}
