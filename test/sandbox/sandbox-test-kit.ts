/**
 * Drives the sandbox the way a client does: real HTTP over loopback with global fetch.
 * Deliberately independent of src/imaging-client so that the conformance suite checks the
 * sandbox against the contract, not against our own client's reading of it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inflateSync, crc32 } from 'node:zlib';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { createMrBrainSeries } from '../helpers/dicom-factory';
import type { SandboxClient, SandboxOptions } from '../../src/sandbox/sandbox-options';

export const ADMIN: SandboxClient = {
  clientId: 'admin-a',
  clientSecret: 'secret-admin-a',
  organizationId: 'org-a',
  role: 'org_admin',
  scopes: ['read', 'write'],
};
export const USER_A1: SandboxClient = {
  clientId: 'user-a1',
  clientSecret: 'secret-a1',
  organizationId: 'org-a',
  role: 'user',
  scopes: ['read', 'write'],
};
export const USER_A2: SandboxClient = {
  clientId: 'user-a2',
  clientSecret: 'secret-a2',
  organizationId: 'org-a',
  role: 'user',
  scopes: ['read', 'write'],
};
export const READER_A: SandboxClient = {
  clientId: 'reader-a',
  clientSecret: 'secret-reader',
  organizationId: 'org-a',
  role: 'org_admin',
  scopes: ['read'],
};
export const WRITER_A: SandboxClient = {
  clientId: 'writer-a',
  clientSecret: 'secret-writer',
  organizationId: 'org-a',
  role: 'org_admin',
  scopes: ['write'],
};
export const ADMIN_B: SandboxClient = {
  clientId: 'admin-b',
  clientSecret: 'secret-admin-b',
  organizationId: 'org-b',
  role: 'org_admin',
  scopes: ['read', 'write'],
};

export const ALL_CLIENTS = [ADMIN, USER_A1, USER_A2, READER_A, WRITER_A, ADMIN_B];

export interface Harness {
  sandbox: RunningSandbox;
  base: string;
  token(client?: SandboxClient): Promise<string>;
  call(method: string, path: string, init?: CallInit): Promise<Reply>;
  close(): Promise<void>;
}

export interface CallInit {
  token?: string | null;
  query?: Record<string, string>;
  json?: unknown;
  body?: string | Buffer;
  headers?: Record<string, string>;
}

export interface Reply {
  status: number;
  headers: Headers;
  buffer: Buffer;
  text: string;
  /** Parsed JSON body, or undefined when the body is not JSON. */
  json: Record<string, unknown>;
}

async function toReply(res: Response): Promise<Reply> {
  const buffer = Buffer.from(await res.arrayBuffer());
  const text = buffer.toString('utf8');
  let json: Record<string, unknown> = {};
  if ((res.headers.get('content-type') ?? '').includes('json'))
    json = JSON.parse(text) as Record<string, unknown>;
  return { status: res.status, headers: res.headers, buffer, text, json };
}

export function basic(client: SandboxClient): string {
  return `Basic ${Buffer.from(`${client.clientId}:${client.clientSecret}`).toString('base64')}`;
}

/** Starts a sandbox on a free loopback port with a manual clock and its own data directory. */
export async function startHarness(overrides: Partial<SandboxOptions> = {}): Promise<Harness> {
  const dataDir = await mkdtemp(join(tmpdir(), 'sandbox-test-'));
  const sandbox = await startSandbox({
    port: 0,
    host: '127.0.0.1',
    clients: ALL_CLIENTS,
    clock: 'manual',
    dataDir,
    ...overrides,
  });
  const base = sandbox.baseUrl;
  // Cached per client while the sandbox clock says the token is still valid.
  const tokens = new Map<string, { token: string; expiresAt: number }>();
  const call = async (method: string, path: string, init: CallInit = {}): Promise<Reply> => {
    const url = new URL(path.startsWith('http') ? path : `${base}${path}`);
    for (const [k, v] of Object.entries(init.query ?? {})) url.searchParams.set(k, v);
    const headers: Record<string, string> = { ...(init.headers ?? {}) };
    if (init.token) headers.authorization = `Bearer ${init.token}`;
    let body: string | Buffer | undefined = init.body;
    if (init.json !== undefined) {
      body = JSON.stringify(init.json);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(url, { method, headers, body: body as RequestInit['body'] });
    return toReply(res);
  };
  const token = async (client: SandboxClient = ADMIN): Promise<string> => {
    const cached = tokens.get(client.clientId);
    if (cached && cached.expiresAt > sandbox.clock.now() + 60_000) return cached.token;
    const r = await call('POST', '/auth/token', {
      headers: {
        authorization: basic(client),
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: 'grant_type=client_credentials',
    });
    if (r.status !== 200) throw new Error(`token for ${client.clientId}: ${r.status} ${r.text}`);
    tokens.set(client.clientId, {
      token: r.json.access_token as string,
      expiresAt: sandbox.clock.now() + (r.json.expires_in as number) * 1000,
    });
    return r.json.access_token as string;
  };
  return {
    sandbox,
    base,
    token,
    call,
    close: async () => {
      await sandbox.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** PUT to a presigned URL exactly as a client would: no Authorization header. */
export async function putObject(
  url: string,
  body: Buffer,
  headers: Record<string, string> = {},
): Promise<Reply> {
  const res = await fetch(url, {
    method: 'PUT',
    body,
    headers: { 'content-type': 'application/octet-stream', ...headers },
  });
  return toReply(res);
}

/**
 * A PUT that announces `declaredBytes` in Content-Length but sends only a little, then waits
 * for the answer: shows that the sandbox refuses an oversized object from its announcement.
 */
export function putDeclaringLength(
  url: string,
  declaredBytes: number,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'PUT', headers: { 'content-length': String(declaredBytes) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') });
          req.destroy();
        });
      },
    );
    req.on('error', reject);
    req.write(Buffer.alloc(1024, 7));
  });
}

export async function newOrder(
  h: Harness,
  metadata: Record<string, unknown> = {},
  token?: string,
): Promise<string> {
  const r = await h.call('POST', '/new-order', {
    token: token ?? (await h.token()),
    json: metadata,
  });
  if (r.status !== 201) throw new Error(`new-order: ${r.status} ${r.text}`);
  return r.json.order_id as string;
}

export async function singlePutUrl(h: Harness, orderId: string, token?: string): Promise<string> {
  const r = await h.call('GET', '/upload/single-put', {
    token: token ?? (await h.token()),
    query: { order_id: orderId },
  });
  if (r.status !== 200) throw new Error(`single-put: ${r.status} ${r.text}`);
  return r.json.url as string;
}

export async function statusOf(h: Harness, orderId: string, token?: string): Promise<string> {
  const r = await h.call('GET', '/status', {
    token: token ?? (await h.token()),
    query: { order_id: orderId },
  });
  if (r.status !== 200) throw new Error(`status: ${r.status} ${r.text}`);
  return r.json.status as string;
}

/** Uploads bytes with a single PUT; expects success. */
export async function uploadSingle(
  h: Harness,
  orderId: string,
  bytes: Buffer,
  token?: string,
): Promise<Reply> {
  const r = await putObject(await singlePutUrl(h, orderId, token), bytes);
  if (r.status !== 200) throw new Error(`PUT: ${r.status} ${r.text}`);
  return r;
}

/** Creates an order with `metadata`, uploads one MR slice, and returns the order id. */
export async function processedOrder(
  h: Harness,
  metadata: Record<string, unknown>,
  token?: string,
): Promise<string> {
  const id = await newOrder(h, metadata, token);
  await uploadSingle(h, id, createMrBrainSeries({ series: { slices: 1 } })[0].bytes, token);
  return id;
}

/** Statuses the order passed through, oldest first (from /recent-activity). */
export async function historyOf(h: Harness, orderId: string): Promise<string[]> {
  const r = await h.call('GET', '/recent-activity', { token: await h.token() });
  return (r.json.activity as { orderId: string; status: string; timestamp: string }[])
    .filter((a) => a.orderId === orderId)
    .reverse()
    .map((a) => a.status);
}

/** Checks PNG structure (ISO/IEC 15948): signature, chunk CRCs, IHDR, and that IDAT inflates to the image size. */
export function assertValidPng(buf: Buffer): { width: number; height: number } {
  if (!buf.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])))
    throw new Error('PNG signature missing');
  let at = 8;
  let width = 0;
  let height = 0;
  let colorType = -1;
  const idat: Buffer[] = [];
  let sawEnd = false;
  while (at < buf.length) {
    const len = buf.readUInt32BE(at);
    const type = buf.toString('latin1', at + 4, at + 8);
    const data = buf.subarray(at + 8, at + 8 + len);
    const crc = buf.readUInt32BE(at + 8 + len);
    if (crc32(buf.subarray(at + 4, at + 8 + len)) >>> 0 !== crc)
      throw new Error(`bad CRC in ${type}`);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      colorType = data[9];
    }
    if (type === 'IDAT') idat.push(data);
    if (type === 'IEND') sawEnd = true;
    at += 12 + len;
  }
  if (!sawEnd) throw new Error('IEND missing');
  const channels = colorType === 2 ? 3 : colorType === 6 ? 4 : 1;
  const raw = inflateSync(Buffer.concat(idat));
  if (raw.length !== height * (width * channels + 1))
    throw new Error(
      `IDAT inflates to ${raw.length} bytes, expected ${height * (width * channels + 1)}`,
    );
  return { width, height };
}

/** Checks a PDF's cross-reference table: every in-use entry points at "N 0 obj". */
export function assertValidPdf(buf: Buffer): { pages: number; text: string } {
  const s = buf.toString('latin1');
  if (!s.startsWith('%PDF-1.')) throw new Error('PDF header missing');
  if (!s.trimEnd().endsWith('%%EOF')) throw new Error('%%EOF missing');
  const startxref = Number(/startxref\s+(\d+)\s+%%EOF\s*$/.exec(s)?.[1]);
  if (!s.startsWith('xref', startxref))
    throw new Error('startxref does not point at the xref table');
  const xref = /xref\s+0 (\d+)\s+([\s\S]*?)trailer/.exec(s.slice(startxref));
  if (!xref) throw new Error('xref table unreadable');
  const entries = xref[2].trim().split(/\r?\n/);
  if (entries.length !== Number(xref[1])) throw new Error('xref entry count mismatch');
  entries.slice(1).forEach((e, i) => {
    const offset = Number(e.slice(0, 10));
    if (!s.startsWith(`${i + 1} 0 obj`, offset))
      throw new Error(`xref entry ${i + 1} points at the wrong offset`);
  });
  const text = [...s.matchAll(/\(((?:\\.|[^\\)])*)\) Tj/g)]
    .map((m) => m[1].replace(/\\(.)/g, '$1'))
    .join('\n');
  return { pages: Number(/\/Count (\d+)/.exec(s)?.[1] ?? 0), text };
}

/** Replaces a same-length placeholder in a ZIP's local and central headers (yazl refuses "../"). */
export function patchZipName(zip: Buffer, placeholder: string, replacement: string): Buffer {
  if (placeholder.length !== replacement.length) throw new Error('same length required');
  const out = Buffer.from(zip);
  const needle = Buffer.from(placeholder, 'latin1');
  let at = out.indexOf(needle);
  let n = 0;
  while (at >= 0) {
    out.write(replacement, at, 'latin1');
    n++;
    at = out.indexOf(needle, at + 1);
  }
  if (n < 2) throw new Error('placeholder not found in both headers');
  return out;
}

export const SECOND = 1000;
export const MINUTE = 60 * SECOND;
