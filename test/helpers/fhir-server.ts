import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getStatus, normalizeOperationOutcome } from '@medplum/core';
import { FhirRouter, MemoryRepository, type FhirRequest } from '@medplum/fhir-router';
import type { Resource } from '@medplum/fhirtypes';
import { loadFhirDefinitions } from '../../src/fhir/fhir-validator';
import { IndexedMemoryRepository, type IdentifierIndexStats } from './indexed-memory-repository';

/**
 * A real FHIR R4 engine on loopback, standing in for an EHR's FHIR server: @medplum/fhir-router
 * (read, vread, search, create incl. conditional, update, transaction) over its in-memory
 * repository, behind a small node:http server. Used to answer the adapter's reads for
 * `id-only` notifications and searches, and (results issue) to receive Task/DiagnosticReport.
 * Searches on `identifier` (and so the conditional create/update the adapter publishes with)
 * are answered through an index, as a production server's are (./indexed-memory-repository.ts);
 * `identifierIndex: false` gives the repository's own scan of every resource of the type.
 */
export interface TestFhirServer {
  baseUrl: string;
  repo: MemoryRepository;
  /** What the identifier index did (undefined when started with `identifierIndex: false`). */
  identifierIndex?: IdentifierIndexStats;
  /** Every request received (method, path with query, headers), for assertions. */
  requests: Array<{ method: string; url: string; headers: IncomingMessage['headers'] }>;
  /** Seeds a resource under its own id (update-as-create in the repository). */
  seed<T extends Resource>(resource: T): Promise<T>;
  /** When set, requests are answered with this status instead (outage simulation). */
  failWith?: number;
  /** When set, every answer waits this long (a slow EHR under load). */
  delayMs?: number;
  /** When set, every request must carry `Authorization: Bearer <token>`. */
  requiredToken?: string;
  /** Served (without authentication) at `.well-known/smart-configuration` when set. */
  smartConfiguration?: Record<string, unknown>;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

export async function startTestFhirServer(
  options: { token?: string; identifierIndex?: boolean } = {},
): Promise<TestFhirServer> {
  loadFhirDefinitions();
  const router = new FhirRouter();
  const repo =
    options.identifierIndex === false ? new MemoryRepository() : new IndexedMemoryRepository();
  const requests: TestFhirServer['requests'] = [];
  let baseUrl = '';
  const state: Pick<
    TestFhirServer,
    'failWith' | 'delayMs' | 'requiredToken' | 'smartConfiguration'
  > = {
    requiredToken: options.token,
  };

  const handler = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    requests.push({ method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers });
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'application/fhir+json', ...headers });
      res.end(body === undefined ? undefined : JSON.stringify(body));
    };
    if (state.delayMs) await new Promise((r) => setTimeout(r, state.delayMs));
    if (state.failWith) {
      send(state.failWith, {
        resourceType: 'OperationOutcome',
        issue: [{ severity: 'error', code: 'transient' }],
      });
      return;
    }
    if (state.smartConfiguration && req.url?.endsWith('/.well-known/smart-configuration')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(state.smartConfiguration));
      return;
    }
    if (state.requiredToken && req.headers.authorization !== `Bearer ${state.requiredToken}`) {
      send(401, {
        resourceType: 'OperationOutcome',
        issue: [{ severity: 'error', code: 'login' }],
      });
      return;
    }
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname.replace(/^\/fhir\/?/, '');
    const fhirRequest: FhirRequest = {
      method: (req.method ?? 'GET') as FhirRequest['method'],
      url: `${path}${url.search}`,
      // The router parses the url itself and insists on an empty pathname.
      pathname: '',
      params: {},
      query: {},
      body: await readBody(req),
      headers: req.headers,
    };
    try {
      const [outcome, resource] = await router.handleRequest(fhirRequest, repo);
      const status = getStatus(outcome);
      const headers: Record<string, string> = {};
      const meta = (resource as { meta?: { versionId?: string } } | undefined)?.meta;
      if (meta?.versionId) headers.etag = `W/"${meta.versionId}"`;
      if (resource?.id && status === 201)
        headers.location = `${baseUrl}/${resource.resourceType}/${resource.id}`;
      if (resource?.resourceType === 'Bundle') {
        // Absolute URLs, as a real server sends them (the router's are relative to its base).
        for (const e of (resource as { entry?: Array<{ fullUrl?: string; resource?: Resource }> })
          .entry ?? []) {
          if (e.resource?.id) e.fullUrl = `${baseUrl}/${e.resource.resourceType}/${e.resource.id}`;
        }
        for (const l of (resource as { link?: Array<{ url: string }> }).link ?? []) {
          if (!/^https?:/.test(l.url)) l.url = `${baseUrl}/${l.url.replace(/^\//, '')}`;
        }
      }
      send(status, resource ?? outcome, headers);
    } catch (error) {
      const outcome = normalizeOperationOutcome(error);
      send(getStatus(outcome), outcome);
    }
  };

  const server: Server = createServer((req, res) => {
    handler(req, res).catch((err: unknown) => {
      res.statusCode = 500;
      res.end(String(err));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/fhir`;

  const api: TestFhirServer = {
    baseUrl,
    repo,
    identifierIndex: repo instanceof IndexedMemoryRepository ? repo.stats : undefined,
    requests,
    get delayMs() {
      return state.delayMs;
    },
    set delayMs(v) {
      state.delayMs = v;
    },
    get failWith() {
      return state.failWith;
    },
    set failWith(v) {
      state.failWith = v;
    },
    get smartConfiguration() {
      return state.smartConfiguration;
    },
    set smartConfiguration(v) {
      state.smartConfiguration = v;
    },
    get requiredToken() {
      return state.requiredToken;
    },
    set requiredToken(v) {
      state.requiredToken = v;
    },
    async seed<T extends Resource>(resource: T): Promise<T> {
      return (await repo.createResource(resource as T & { id: string }, { assignedId: true })) as T;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return api;
}
