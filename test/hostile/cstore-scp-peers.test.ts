import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client, Dataset, requests } from 'dcmjs-dimse';
import { freePort } from '../../src/persistence/embedded-postgres';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { createTestDatabase } from '../helpers/database';
import { rawInstance } from '../helpers/raw-dicom';
import { createMrBrainStudy, shortPixelData } from '../helpers/dicom-factory';
import { StudyStoragePaths } from '../../src/studies/study-storage.paths';
import { insertOrder } from '../studies/study-test-support';

const run = promisify(execFile);
jest.setTimeout(120_000);

const AE = 'ADAPTER-HOSTILE';

/**
 * A-ASSOCIATE-RQ (PS3.8 §9.3.2) for Secondary Capture, by default one presentation context in
 * explicit VR little endian.
 */
function associateRq(
  calledAe: string,
  callingAe: string,
  contexts: ReadonlyArray<{ id: number; syntaxes: string[] }> = [
    { id: 1, syntaxes: ['1.2.840.10008.1.2.1'] },
  ],
): Buffer {
  const item = (type: number, data: Buffer) => {
    const h = Buffer.alloc(4);
    h.writeUInt8(type, 0);
    h.writeUInt16BE(data.length, 2);
    return Buffer.concat([h, data]);
  };
  const ae = (s: string) => Buffer.from(s.padEnd(16, ' '), 'latin1');
  const maxLength = Buffer.alloc(4);
  maxLength.writeUInt32BE(16384);
  const body = Buffer.concat([
    Buffer.from([0, 1, 0, 0]),
    ae(calledAe),
    ae(callingAe),
    Buffer.alloc(32),
    item(0x10, Buffer.from('1.2.840.10008.3.1.1.1')),
    ...contexts.map((c) =>
      item(
        0x20,
        Buffer.concat([
          Buffer.from([c.id, 0, 0, 0]),
          item(0x30, Buffer.from('1.2.840.10008.5.1.4.1.1.7')),
          ...c.syntaxes.map((ts) => item(0x40, Buffer.from(ts))),
        ]),
      ),
    ),
    item(0x50, Buffer.concat([item(0x51, maxLength), item(0x52, Buffer.from('1.2.3.4'))])),
  ]);
  const head = Buffer.alloc(6);
  head.writeUInt8(1, 0);
  head.writeUInt32BE(body.length, 2);
  return Buffer.concat([head, body]);
}

/** The presentation context results of an A-ASSOCIATE-AC (PS3.8 §9.3.3.2): id → result, syntax. */
function contextResults(ac: Buffer): Map<number, { result: number; syntax: string }> {
  const out = new Map<number, { result: number; syntax: string }>();
  for (let at = 74; at + 4 <= ac.length;) {
    const type = ac[at]!;
    const length = ac.readUInt16BE(at + 2);
    if (type === 0x21) {
      const sub = ac.subarray(at + 8, at + 4 + length);
      const syntax = sub.length >= 4 ? sub.toString('latin1', 4, 4 + sub.readUInt16BE(2)) : '';
      out.set(ac[at + 4]!, { result: ac[at + 6]!, syntax });
    }
    at += 4 + length;
  }
  return out;
}

/**
 * One C-STORE of `file` to our SCP at `port` as `callingAe` (dcmjs-dimse, as a modality or a
 * router sends it), with `command` elements set in its command set; the status answered.
 */
function cStore(
  port: number,
  file: string,
  callingAe: string,
  command: Record<string, string> = {},
): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const client = new Client();
    const req = new requests.CStoreRequest(file);
    for (const [name, value] of Object.entries(command))
      req.getCommandDataset().setElement(name, value);
    let answer: number | undefined;
    req.on('response', (r) => (answer = r.getStatus()));
    client.addRequest(req);
    client.on('networkError', reject);
    client.on('closed', () =>
      answer === undefined ? reject(new Error('no answer')) : resolve(answer),
    );
    client.send('127.0.0.1', port, callingAe, AE);
  });
}

/**
 * An adapter whose C-STORE SCP listens on a free port as AE, jobs off, with `env` on top, and a
 * scratch folder for the files a peer sends: started before the block's tests, removed after.
 */
function scpAdapter(env: Record<string, string>): {
  adapter: TestAdapter;
  port: number;
  dir: string;
} {
  const scp = {} as { adapter: TestAdapter; port: number; dir: string };
  beforeAll(async () => {
    scp.port = await freePort();
    scp.adapter = await startTestAdapter({
      DICOM_SCP_PORT: String(scp.port),
      DICOM_SCP_AE_TITLE: AE,
      JOBS_ENABLED: 'false',
      ...env,
    });
    scp.dir = mkdtempSync(join(tmpdir(), 'cstore-hostile-'));
  });
  afterAll(async () => {
    await scp.adapter?.close();
    if (scp.adapter) rmSync(scp.adapter.dataDir, { recursive: true, force: true });
    if (scp.dir) rmSync(scp.dir, { recursive: true, force: true });
  });
  return scp;
}

/**
 * Peers of the C-STORE SCP that are not what they claim or send what no PACS sends: a C-STORE
 * that names our AE title as Move Originator from an association the DIMSE PACS did not open,
 * a P-DATA-TF PDU claiming 2 GiB, a calling AE outside the allow-list. Each is refused or
 * filed as an ordinary push, and recorded for the audit log with who and from where.
 */
describe('hostile: C-STORE SCP peers', () => {
  let adapter: TestAdapter;
  let port: number;
  let dir: string;

  const scp = scpAdapter({
    DICOM_SCP_CALLING_AE_TITLES: 'MODALITY1,INTRUDER',
    DICOM_SCP_MAX_ASSOCIATIONS: '8',
  });
  beforeAll(() => ({ adapter, port, dir } = scp));

  const audit = async (kind: string) =>
    (await adapter.dataSource.query(
      `SELECT actor, summary, detail FROM audit_events WHERE kind = $1 ORDER BY id`,
      [kind],
    )) as Array<{ actor: string; summary: string; detail: Record<string, unknown> }>;

  it('a C-STORE naming our AE as Move Originator from an AE that is not the move source is a push, audited with its sender', async () => {
    const inst = rawInstance({ accession: 'SPOOF-1', patientId: 'P-SPOOF' });
    const file = join(dir, 'spoof.dcm');
    writeFileSync(file, inst.bytes);
    const status = await cStore(port, file, 'INTRUDER', {
      MoveOriginatorApplicationEntityTitle: AE,
    });
    expect(status).toBe(0);
    // Not slipped into the store of our own moves …
    const moved = join(adapter.dataDir, 'studies', 'moved', inst.studyInstanceUid);
    expect(existsSync(moved) ? readdirSync(moved) : []).toEqual([]);
    // … but received like any pushed instance, with who sent it.
    const rows = (await adapter.dataSource.query(
      `SELECT source, sender FROM study_instances WHERE sop_instance_uid = $1`,
      [inst.sopInstanceUid],
    )) as Array<{ source: string; sender: string }>;
    expect(rows).toEqual([{ source: 'c-store', sender: 'dicom:INTRUDER' }]);
    const received = await audit('study.received');
    expect(received.some((e) => e.actor === 'dicom:INTRUDER')).toBe(true);
  });

  it('a C-STORE whose data set is another SOP Instance than its command names is refused A900, kept for the audit', async () => {
    // PS3.7 §9.1.1: the Affected SOP Instance UID is the instance stored. A sender that names
    // one and sends another (a router rewriting UIDs in the data set only) was stored with a
    // File Meta Information naming the command's UID over a data set of another instance.
    const inst = rawInstance({ accession: 'MISMATCH-1', patientId: 'P-MISMATCH' });
    const file = join(dir, 'mismatch.dcm');
    writeFileSync(file, inst.bytes);
    const status = await cStore(port, file, 'MODALITY1', {
      AffectedSOPInstanceUID: '2.25.1234567890',
    });
    expect(status).toBe(0xa900);
    const rows = (await adapter.dataSource.query(
      `SELECT count(*)::int AS n FROM study_instances WHERE sop_instance_uid IN ($1, $2)`,
      [inst.sopInstanceUid, '2.25.1234567890'],
    )) as Array<{ n: number }>;
    expect(rows[0]!.n).toBe(0);
    const received = (await audit('study.received')).find((e) =>
      JSON.stringify(e.detail).includes(inst.sopInstanceUid),
    );
    expect(received?.detail.refused).toEqual([
      expect.objectContaining({
        failureReason: 0xa900,
        reason: 'the data set is another SOP Class or Instance than the C-STORE request names',
        keptAs: expect.any(String),
      }),
    ]);
  });

  it.each([['implicit VR little endian', '1.2.840.10008.1.2']])(
    'a C-STORE data set (%s) carrying group 0002 elements, as some old senders write it, is stored without them',
    async (_label, syntax) => {
      // PS3.10 §7.1 keeps group 0002 out of a data set, but some old senders and archives send
      // the File Meta Information in it. Behind our own header the walk read those elements as
      // part of it: C000, "file meta information cannot be read (an element has no valid VR)"
      // in implicit VR, a reason that named nothing the sender could fix.
      const inst = rawInstance({ accession: `META-${syntax.length}`, patientId: 'P-META' });
      const file = join(dir, `meta-in-dataset-${syntax.length}.dcm`);
      writeFileSync(file, inst.bytes);
      const elements = {
        MediaStorageSOPClassUID: '1.2.840.10008.5.1.4.1.1.7',
        MediaStorageSOPInstanceUID: inst.sopInstanceUid,
        TransferSyntaxUID: syntax,
        ImplementationVersionName: 'OLDSENDER_1',
        ...Dataset.fromFile(file)!.getElements(),
      };
      const status = await new Promise<number>((resolve, reject) => {
        const client = new Client();
        const req = new requests.CStoreRequest(new Dataset(elements, syntax));
        let answer: number | undefined;
        req.on('response', (r) => (answer = r.getStatus()));
        client.addRequest(req);
        client.on('networkError', reject);
        client.on('closed', () =>
          answer === undefined ? reject(new Error('no answer')) : resolve(answer),
        );
        client.send('127.0.0.1', port, 'MODALITY1', AE);
      });
      expect(status).toBe(0);
      const rows = (await adapter.dataSource.query(
        `SELECT transfer_syntax_uid, file_path FROM study_instances WHERE sop_instance_uid = $1`,
        [inst.sopInstanceUid],
      )) as Array<{ transfer_syntax_uid: string; file_path: string }>;
      expect(rows).toEqual([{ transfer_syntax_uid: syntax, file_path: expect.any(String) }]);
      // The stored file has one File Meta Information, ours, and a data set without group 0002.
      const dump = (await run('dcmdump', ['+E', rows[0]!.file_path])).stdout;
      const [meta, dataSet] = dump.split('# Dicom-Data-Set');
      expect(meta).toContain('(0002,0013) SH [IAA_SCP_1]');
      expect(meta).not.toContain('OLDSENDER_1');
      expect(dataSet).not.toContain('(0002,');
      expect(dataSet).toContain('(0010,0020) LO [P-META]');
      // Recorded with the instance's study.received entry.
      const received = (await audit('study.received')).find((e) =>
        JSON.stringify(e.detail).includes(inst.sopInstanceUid),
      );
      expect(received?.detail.quirks).toEqual([
        {
          sopInstanceUid: inst.sopInstanceUid,
          quirks: ['4 group 0002 element(s) in the data set (File Meta Information) dropped'],
        },
      ]);
    },
  );

  it('a PDU claiming 2 GiB is aborted after its header (gone before 64 MiB were sent), /health answers, the refusal is audited', async () => {
    const socket = connect(port, '127.0.0.1');
    const received: Buffer[] = [];
    socket.on('data', (c: Buffer) => received.push(c));
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.on('error', () => undefined);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(associateRq(AE, 'MODALITY1'));
    await new Promise((r) => setTimeout(r, 300));
    expect(received[0]?.[0]).toBe(0x02); // A-ASSOCIATE-AC
    received.length = 0;
    const pdata = Buffer.alloc(12);
    pdata.writeUInt8(0x04, 0);
    pdata.writeUInt32BE(0x7ffffff0, 2);
    pdata.writeUInt32BE(0x7fffffe0, 6);
    pdata.writeUInt8(1, 10);
    socket.write(pdata);
    // Keep sending, as a hostile peer would: 64 MiB at most before the connection must be gone.
    const chunk = Buffer.alloc(1 << 20);
    let sent = 0;
    let gone = false;
    void closed.then(() => (gone = true));
    const started = Date.now();
    while (!gone && sent < 64 && Date.now() - started < 10_000) {
      if (!socket.write(chunk)) await new Promise((r) => setTimeout(r, 20));
      sent++;
    }
    await Promise.race([closed, new Promise((r) => setTimeout(r, 5_000))]);
    expect(gone).toBe(true);
    expect(Buffer.concat(received)[0]).toBe(0x07); // A-ABORT
    const health = await fetch(`${adapter.httpUrl}/health`);
    expect(health.status).toBe(200);
    const refused = await audit('study.association-refused');
    expect(refused).toContainEqual(
      expect.objectContaining({
        actor: 'dicom:MODALITY1',
        detail: expect.objectContaining({ peer: expect.stringMatching(/127\.0\.0\.1/) }),
      }),
    );
    expect(refused.find((e) => e.actor === 'dicom:MODALITY1')!.summary).toMatch(
      /PDU of 2147483632 bytes/,
    );
  });

  it('a private transfer syntax is declined at negotiation; the standard one proposed beside it is taken', async () => {
    // An older GE console proposes its private syntax (1.2.840.113619.5.2: implicit VR with
    // big endian pixel data, DCMTK's UID_PrivateGE_LEI_WithBigEndianPixelDataTransferSyntax)
    // first, and implicit VR little endian in the same and in another context. Before: the
    // private one was accepted where it came first, and each instance sent in it refused C000.
    const GE_PRIVATE = '1.2.840.113619.5.2';
    const socket = connect(port, '127.0.0.1');
    const received: Buffer[] = [];
    socket.on('data', (c: Buffer) => received.push(c));
    socket.on('error', () => undefined);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(
      associateRq(AE, 'MODALITY1', [
        { id: 1, syntaxes: [GE_PRIVATE] },
        { id: 3, syntaxes: [GE_PRIVATE, '1.2.840.10008.1.2'] },
      ]),
    );
    for (let i = 0; i < 50 && Buffer.concat(received).length < 6; i++)
      await new Promise((r) => setTimeout(r, 20));
    const ac = Buffer.concat(received);
    socket.destroy();
    expect(ac[0]).toBe(0x02); // A-ASSOCIATE-AC
    const results = contextResults(ac);
    expect(results.get(1)?.result).toBe(4); // transfer syntaxes not supported
    expect(results.get(3)).toEqual({ result: 0, syntax: '1.2.840.10008.1.2' });
  });

  it('a sender proposing its compressed syntax first keeps it: the SCP accepts the first proposed it can take', async () => {
    // One presentation context proposing JPEG Lossless SV1 first, then explicit and implicit
    // VR little endian (storescu with an association profile, as a modality that holds
    // compressed images proposes). An SCP that prefers uncompressed makes such a sender
    // decompress (or fail where it cannot); we store files as received, so the sender's
    // preference is kept, as DCMTK's storescp does by default.
    const dir = mkdtempSync(join(tmpdir(), 'cstore-ts-'));
    try {
      const [mr] = createMrBrainStudy({ series: [{ slices: 1 }] });
      const plain = join(dir, 'mr.dcm');
      const jpeg = join(dir, 'mr-jpeg-lossless.dcm');
      const cfg = join(dir, 'storescu.cfg');
      writeFileSync(plain, mr!.bytes);
      writeFileSync(
        cfg,
        [
          '[[TransferSyntaxes]]',
          '[JpegFirst]',
          'TransferSyntax1 = 1.2.840.10008.1.2.4.70',
          'TransferSyntax2 = 1.2.840.10008.1.2.1',
          'TransferSyntax3 = 1.2.840.10008.1.2',
          '[[PresentationContexts]]',
          '[MrContexts]',
          'PresentationContext1 = 1.2.840.10008.5.1.4.1.1.4\\JpegFirst',
          '[[Profiles]]',
          '[JpegFirstProfile]',
          'PresentationContexts = MrContexts',
          '',
        ].join('\n'),
      );
      await run('dcmcjpeg', ['+e1', plain, jpeg]);
      await run('storescu', [
        '-xf',
        cfg,
        'JpegFirstProfile',
        '-aet',
        'MODALITY1',
        '-aec',
        AE,
        '127.0.0.1',
        String(port),
        jpeg,
      ]);
      const rows = (await adapter.dataSource.query(
        `SELECT header->>'transferSyntaxUid' AS ts FROM study_instances WHERE sop_instance_uid = $1`,
        [mr!.sopInstanceUid],
      )) as Array<{ ts: string }>;
      // before: 1.2.840.10008.1.2.1, storescu decompressed the image to send it
      expect(rows).toEqual([{ ts: '1.2.840.10008.1.2.4.70' }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('uncompressed proposals: the first proposed is taken (implicit VR first stays implicit)', async () => {
    const socket = connect(port, '127.0.0.1');
    const received: Buffer[] = [];
    socket.on('data', (c: Buffer) => received.push(c));
    socket.on('error', () => undefined);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(
      associateRq(AE, 'MODALITY1', [
        { id: 1, syntaxes: ['1.2.840.10008.1.2', '1.2.840.10008.1.2.1'] },
        { id: 3, syntaxes: ['1.2.840.10008.1.2.4.90', '1.2.840.10008.1.2.1'] },
        { id: 5, syntaxes: ['1.2.840.10008.1.2.1.99', '1.2.840.10008.1.2.4.50'] },
        // JPIP referenced: the pixels stay on the sender's JPIP server (PS3.5 §A.6)
        { id: 7, syntaxes: ['1.2.840.10008.1.2.4.94', '1.2.840.10008.1.2.1'] },
        { id: 9, syntaxes: ['1.2.840.10008.1.2.4.204', '1.2.840.10008.1.2.4.95'] },
      ]),
    );
    for (let i = 0; i < 50 && Buffer.concat(received).length < 6; i++)
      await new Promise((r) => setTimeout(r, 20));
    const ac = Buffer.concat(received);
    socket.destroy();
    expect(ac[0]).toBe(0x02);
    const results = contextResults(ac);
    expect(results.get(1)).toEqual({ result: 0, syntax: '1.2.840.10008.1.2' });
    expect(results.get(3)).toEqual({ result: 0, syntax: '1.2.840.10008.1.2.4.90' });
    // deflate is still declined: the next one proposed is taken
    expect(results.get(5)).toEqual({ result: 0, syntax: '1.2.840.10008.1.2.4.50' });
    expect(results.get(7)).toEqual({ result: 0, syntax: '1.2.840.10008.1.2.1' });
    expect(results.get(9)?.result).toBe(4);
  });

  it('a calling AE outside DICOM_SCP_CALLING_AE_TITLES is rejected and recorded; a flood of them writes one entry', async () => {
    for (let i = 0; i < 5; i++)
      await expect(
        run('echoscu', ['-aet', 'STRANGER', '-aec', AE, '127.0.0.1', String(port)]),
      ).rejects.toThrow();
    await expect(
      run('echoscu', ['-aet', 'MODALITY1', '-aec', AE, '127.0.0.1', String(port)]),
    ).resolves.toBeDefined();
    await new Promise((r) => setTimeout(r, 300));
    const refused = (await audit('study.association-refused')).filter(
      (e) => e.actor === 'dicom:STRANGER',
    );
    expect(refused).toHaveLength(1);
    expect(refused[0]!.detail).toMatchObject({
      reason: 'calling AE title not in DICOM_SCP_CALLING_AE_TITLES',
      calledAe: AE,
    });
  });

  it('an association flood: past DICOM_SCP_MAX_ASSOCIATIONS a connection is closed at once, /health answers, one audit entry', async () => {
    const openOne = () =>
      new Promise<import('node:net').Socket>((resolve, reject) => {
        const s = connect(port, '127.0.0.1', () => resolve(s));
        s.on('error', reject);
      });
    const held = [];
    for (let i = 0; i < 8; i++) {
      const s = await openOne();
      // Held once the SCP has answered (A-ASSOCIATE-AC): it counts this connection by then.
      const accepted = new Promise<boolean>((resolve) => {
        s.once('data', () => resolve(true));
        s.once('close', () => resolve(false));
      });
      s.write(associateRq(AE, 'MODALITY1'));
      expect(await accepted).toBe(true);
      held.push(s);
    }
    // Each connection's close is watched from its first moment: under load the SCP may close
    // one before the others have connected.
    const closedWithin = await Promise.all(
      Array.from(
        { length: 20 },
        () =>
          new Promise<boolean>((resolve) => {
            const s = connect(port, '127.0.0.1');
            s.on('error', () => undefined);
            const t = setTimeout(() => {
              s.destroy();
              resolve(false);
            }, 2_000);
            s.once('close', () => {
              clearTimeout(t);
              resolve(true);
            });
          }),
      ),
    );
    expect(closedWithin.every(Boolean)).toBe(true);
    expect((await fetch(`${adapter.httpUrl}/health`)).status).toBe(200);
    // the entry is written after the connection is closed: on a loaded machine it may follow
    const floodEntries = async () =>
      (await audit('study.association-refused')).filter((e) =>
        /DICOM_SCP_MAX_ASSOCIATIONS/.test(e.summary),
      );
    for (let i = 0; i < 50 && (await floodEntries()).length === 0; i++)
      await new Promise((r) => setTimeout(r, 100));
    await new Promise((r) => setTimeout(r, 300)); // and no second one follows
    const flood = await floodEntries();
    expect(flood).toHaveLength(1);
    for (const s of held) s.destroy();
    await new Promise((r) => setTimeout(r, 300));
    // The slots are free again.
    await expect(
      run('echoscu', ['-aet', 'MODALITY1', '-aec', AE, '127.0.0.1', String(port)]),
    ).resolves.toBeDefined();
  });
});

/**
 * Peers that open associations and then say nothing, or say it one byte at a time: the slots
 * DICOM_SCP_MAX_ASSOCIATIONS bounds must come free again without them, or a handful of idle
 * connections keeps every modality out for good.
 */
describe('hostile: C-STORE SCP peers that hold a connection', () => {
  let adapter: TestAdapter;
  let port: number;

  const scp = scpAdapter({
    DICOM_SCP_MAX_ASSOCIATIONS: '4',
    DICOM_SCP_TIMEOUT_SECONDS: '1',
    STOW_MAX_REQUEST_BYTES: String(1024 * 1024),
  });
  beforeAll(() => ({ adapter, port } = scp));

  /** Resolves with whether the SCP closed `s` within `ms`. */
  const closedWithin = (s: import('node:net').Socket, ms: number) =>
    new Promise<boolean>((resolve) => {
      if (s.destroyed) return resolve(true);
      const t = setTimeout(() => resolve(false), ms);
      s.once('close', () => {
        clearTimeout(t);
        resolve(true);
      });
    });

  it('connections that send nothing, or drip an A-ASSOCIATE-RQ or P-DATA one byte a time, are aborted after DICOM_SCP_TIMEOUT_SECONDS; a modality then sends', async () => {
    const open = () =>
      new Promise<import('node:net').Socket>((resolve, reject) => {
        const s = connect(port, '127.0.0.1', () => resolve(s));
        s.on('error', () => undefined);
        s.once('error', reject);
        s.resume(); // read what the SCP sends, so its close is seen
      });
    const silent = await open();
    // an A-ASSOCIATE-RQ that never ends: a byte every 300 ms (never idle for a second)
    const dripAssociate = await open();
    const rq = associateRq(AE, 'MODALITY1');
    let at = 0;
    const drip1 = setInterval(() => {
      if (at < rq.length - 1 && !dripAssociate.destroyed)
        dripAssociate.write(rq.subarray(at, ++at));
    }, 300);
    // an association accepted, then a P-DATA-TF PDU dripped a byte at a time
    const dripData = await open();
    const accepted = new Promise<void>((resolve) => dripData.once('data', () => resolve()));
    dripData.write(associateRq(AE, 'MODALITY1'));
    await accepted;
    const pdata = Buffer.concat([Buffer.from([0x04, 0, 0, 0, 0x01, 0]), Buffer.alloc(256)]);
    let dataAt = 0;
    const drip2 = setInterval(() => {
      if (dataAt < pdata.length - 1 && !dripData.destroyed)
        dripData.write(pdata.subarray(dataAt, ++dataAt));
    }, 300);
    // a fourth, accepted and then silent
    const idle = await open();
    const idleAccepted = new Promise<void>((resolve) => idle.once('data', () => resolve()));
    idle.write(associateRq(AE, 'MODALITY1'));
    await idleAccepted;
    try {
      // 1 s of timeout; 20 s is generous for a loaded machine
      const closed = await Promise.all(
        [silent, dripAssociate, dripData, idle].map((s) => closedWithin(s, 20_000)),
      );
      expect(closed).toEqual([true, true, true, true]);
      // the slots are free: a modality's association goes through
      await expect(
        run('echoscu', ['-aet', 'MODALITY1', '-aec', AE, '127.0.0.1', String(port)]),
      ).resolves.toBeDefined();
      expect((await fetch(`${adapter.httpUrl}/health`)).status).toBe(200);
      const entries = (await adapter.dataSource.query(
        `SELECT summary FROM audit_events WHERE kind = 'study.association-refused' ORDER BY id`,
      )) as Array<{ summary: string }>;
      expect(entries.some((e) => /DICOM_SCP_TIMEOUT_SECONDS/.test(e.summary))).toBe(true);
    } finally {
      clearInterval(drip1);
      clearInterval(drip2);
      for (const s of [silent, dripAssociate, dripData, idle]) s.destroy();
    }
  });

  it('a C-STORE data set larger than STOW_MAX_REQUEST_BYTES is aborted while it arrives: nothing on disk, audited', async () => {
    // There was no limit: a peer streaming one endless C-STORE filled DATA_DIR.
    const dir = mkdtempSync(join(tmpdir(), 'cstore-big-'));
    try {
      const [big] = createMrBrainStudy({ series: [{ slices: 1, rows: 1024, columns: 1024 }] });
      const file = join(dir, 'big.dcm');
      writeFileSync(file, big!.bytes);
      const result = await run('storescu', [
        '-aet',
        'MODALITY1',
        '-aec',
        AE,
        '127.0.0.1',
        String(port),
        file,
      ]).catch((e: { stdout: string; stderr: string }) => e);
      expect(
        `${(result as { stdout: string }).stdout}${(result as { stderr: string }).stderr}`,
      ).toMatch(/abort|Association Aborted|DIMSE Failed|Peer aborted/i);
      const rows = (await adapter.dataSource.query(
        `SELECT count(*)::int AS n FROM study_instances WHERE sop_instance_uid = $1`,
        [big!.sopInstanceUid],
      )) as Array<{ n: number }>;
      expect(rows[0]!.n).toBe(0);
      const incoming = join(adapter.dataDir, 'studies', 'incoming');
      for (let i = 0; i < 50 && readdirSync(incoming).length > 0; i++)
        await new Promise((r) => setTimeout(r, 100));
      expect(readdirSync(incoming)).toEqual([]);
      // The refusal is audited beside the abort, not before it: asked until it is there (CI
      // under load once read the table a moment too early).
      const audited = async () =>
        (
          (await adapter.dataSource.query(
            `SELECT summary FROM audit_events WHERE kind = 'study.association-refused' ORDER BY id`,
          )) as Array<{ summary: string }>
        ).some((e) => /STOW_MAX_REQUEST_BYTES/.test(e.summary));
      for (let i = 0; i < 50 && !(await audited()); i++)
        await new Promise((r) => setTimeout(r, 100));
      expect(await audited()).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('hostile: one address cannot take every C-STORE SCP slot (DICOM_SCP_MAX_ASSOCIATIONS_PER_CLIENT)', () => {
  let port: number;
  let dir: string;

  const scp = scpAdapter({
    DICOM_SCP_CALLING_AE_TITLES: 'MODALITY1',
    DICOM_SCP_MAX_ASSOCIATIONS: '8',
    DICOM_SCP_MAX_ASSOCIATIONS_PER_CLIENT: '3',
  });
  beforeAll(() => ({ port, dir } = scp));

  it('8 silent connections from one address: 3 held, and a modality elsewhere still stores (status 0)', async () => {
    // Before: all 8 slots held for DICOM_SCP_TIMEOUT_SECONDS (60 s) by one address that then
    // reconnects; the modality's association was closed at once.
    const flood: Array<{ socket: import('node:net').Socket; closed: boolean }> = [];
    for (let i = 0; i < 8; i++) {
      const entry = {
        socket: connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' }),
        closed: false,
      };
      entry.socket.on('error', () => undefined);
      entry.socket.on('close', () => (entry.closed = true));
      await new Promise((r) => entry.socket.once('connect', r).once('close', r));
      flood.push(entry);
    }
    await new Promise((r) => setTimeout(r, 300));
    try {
      expect(flood.filter((f) => !f.closed)).toHaveLength(3);
      const inst = rawInstance({ accession: 'PERCLIENT-1', patientId: 'P-PERCLIENT' });
      const file = join(dir, 'perclient.dcm');
      writeFileSync(file, inst.bytes);
      const status = await cStore(port, file, 'MODALITY1');
      expect(status).toBe(0);
    } finally {
      for (const f of flood) f.socket.destroy();
    }
  });
});

describe('hostile: a peer that aborts its association (A-ABORT, PS3.8 §7.3.4, §9.1.6)', () => {
  let port: number;
  let dir: string;

  // One slot an address: an aborted association still holding its slot refuses the next one.
  const scp = scpAdapter({
    DICOM_SCP_CALLING_AE_TITLES: 'MODALITY1',
    DICOM_SCP_MAX_ASSOCIATIONS_PER_CLIENT: '1',
  });
  beforeAll(() => ({ port, dir } = scp));

  it('the SCP closes the connection on an A-ABORT at once and the address gets its slot back', async () => {
    // Before: the SCP ignored the A-ABORT; the connection and its slot stayed until the peer
    // gave up (storescu --abort: its ACSE timeout, 30 s) or DICOM_SCP_TIMEOUT_SECONDS.
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    const accepted = new Promise<Buffer>((resolve) => socket.once('data', resolve));
    socket.write(associateRq(AE, 'MODALITY1'));
    expect((await accepted)[0]).toBe(0x02);
    const closed = new Promise<number>((resolve) => {
      const t = setTimeout(() => resolve(Infinity), 10_000);
      socket.once('close', () => {
        clearTimeout(t);
        resolve(Date.now());
      });
    });
    socket.resume();
    const abortedAt = Date.now();
    // A-ABORT: type 7, length 4, reserved, reserved, source 0 (service user), reason 0
    socket.write(Buffer.from([0x07, 0, 0, 0, 0, 4, 0, 0, 0, 0]));
    expect((await closed) - abortedAt).toBeLessThan(1000);

    // storescu --abort sends its store, then A-ABORT, and waits for the close (ACSE timeout,
    // 30 s by default): it is over in a moment.
    const inst = rawInstance({ accession: 'ABORT-1', patientId: 'P-ABORT' });
    const file = join(dir, 'abort.dcm');
    writeFileSync(file, inst.bytes);
    const started = Date.now();
    const result = await run('storescu', [
      '-v',
      '--abort',
      '-aet',
      'MODALITY1',
      '-aec',
      AE,
      '127.0.0.1',
      String(port),
      file,
    ]).catch((e: { stdout: string; stderr: string }) => e);
    const elapsed = Date.now() - started;
    expect(`${result.stdout}${result.stderr}`).toMatch(/Received Store Response \(Success\)/);
    expect(`${result.stdout}${result.stderr}`).toMatch(/Aborting Association/);
    expect(elapsed).toBeLessThan(5000);
    // The slot of the same address is free: its next association is accepted and stores.
    const again = join(dir, 'after-abort.dcm');
    writeFileSync(again, rawInstance({ accession: 'ABORT-2', patientId: 'P-ABORT' }).bytes);
    expect(await cStore(port, again, 'MODALITY1')).toBe(0);
  });
});

/**
 * A P-DATA-TF PDU (PS3.8 §9.3.5) of one PDV of presentation context 1: a command or a data
 * set fragment, the last of its message or not.
 */
function pData(command: boolean, bytes: Buffer, last = true): Buffer {
  const head = Buffer.alloc(12);
  head.writeUInt8(0x04, 0);
  head.writeUInt32BE(bytes.length + 6, 2);
  head.writeUInt32BE(bytes.length + 2, 6);
  head.writeUInt8(1, 10);
  head.writeUInt8((command ? 0x01 : 0) | (last ? 0x02 : 0), 11);
  return Buffer.concat([head, bytes]);
}

/** A C-STORE-RQ command set (PS3.7 §9.3.1.1), implicit VR little endian. */
function cStoreCommand(messageId: number, sopInstanceUid: string): Buffer {
  const element = (tag: number, value: Buffer) => {
    const h = Buffer.alloc(8);
    h.writeUInt16LE(0x0000, 0);
    h.writeUInt16LE(tag, 2);
    h.writeUInt32LE(value.length, 4);
    return Buffer.concat([h, value]);
  };
  const uid = (v: string) => Buffer.from(v.length % 2 ? `${v}\0` : v, 'latin1');
  const us = (v: number) => Buffer.from([v & 0xff, v >> 8]);
  const body = Buffer.concat([
    element(0x0002, uid('1.2.840.10008.5.1.4.1.1.7')),
    element(0x0100, us(0x0001)),
    element(0x0110, us(messageId)),
    element(0x0700, us(0)),
    element(0x0800, us(0x0000)),
    element(0x1000, uid(sopInstanceUid)),
  ]);
  const length = Buffer.alloc(4);
  length.writeUInt32LE(body.length);
  return Buffer.concat([element(0x0000, length), body]);
}

describe('hostile: the adapter stops while a C-STORE association is open', () => {
  it("the association's refused data sets, one still in intake, are audited before the database closes", async () => {
    // Before: the stop did not wait for the associations. Refusals waiting for the release
    // were written as the connection closed, but one whose intake was still running was put
    // to wait 10 s (AUDIT_DELAY_MS) and lost when the database closed; nothing waited for
    // the intake either.
    const db = await createTestDatabase();
    const port = await freePort();
    let adapter: TestAdapter | undefined = await startTestAdapter({
      DATABASE_URL: db.url,
      DICOM_SCP_PORT: String(port),
      DICOM_SCP_AE_TITLE: AE,
      JOBS_ENABLED: 'false',
    });
    const incoming = join(adapter.dataDir, 'studies', 'incoming');
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    try {
      let wanted: { type: number; resolve: () => void } | undefined;
      socket.on('data', (chunk: Buffer) => {
        if (wanted && chunk[0] === wanted.type) wanted.resolve();
      });
      const next = (type: number) => new Promise<void>((resolve) => (wanted = { type, resolve }));
      let answered = next(0x02);
      socket.write(associateRq(AE, 'MODALITY1'));
      await answered;
      // Data sets that are no instance (a Patient's Name, no SOP UIDs): each refused.
      const patientName = Buffer.from([0x10, 0, 0x10, 0, 0x50, 0x4e, 2, 0, 0x58, 0x20]);
      for (let i = 1; i <= 3; i++) {
        answered = next(0x04);
        socket.write(pData(true, cStoreCommand(i, `1.2.826.0.1.3680043.10.543.${i}`)));
        socket.write(pData(false, patientName));
        await answered;
      }
      // A fourth with 96 MiB of private OB after the name: its intake (hashing the file to keep
      // it) is still running when the stop begins, once the whole data set is on disk.
      const size = 96 * 1024 * 1024;
      const ob = Buffer.from([0x09, 0, 0x01, 0x10, 0x4f, 0x42, 0, 0, 0, 0, 0, 0]);
      ob.writeUInt32LE(size, 8);
      socket.write(pData(true, cStoreCommand(4, '1.2.826.0.1.3680043.10.543.4')));
      socket.write(pData(false, Buffer.concat([patientName, ob]), false));
      const fragment = Buffer.alloc(512 * 1024);
      for (let sent = 0; sent < size; sent += fragment.length)
        socket.write(pData(false, fragment, sent + fragment.length >= size));
      let onDisk = false;
      for (let i = 0; i < 600 && !onDisk; i++) {
        await new Promise((r) => setTimeout(r, 20));
        onDisk = readdirSync(incoming).some(
          (name) => (statSync(join(incoming, name), { throwIfNoEntry: false })?.size ?? 0) >= size,
        );
      }
      expect(onDisk).toBe(true);
      const refusedDir = join(adapter.dataDir, 'studies', 'refused');
      await adapter.close();
      adapter = undefined;
      const rows = (await db.dataSource.query(
        `SELECT detail FROM audit_events WHERE kind = 'study.received' AND actor = 'dicom:MODALITY1'`,
      )) as Array<{ detail: { refused: Array<{ sizeBytes: number; keptAs?: string }> } }>;
      const refused = rows.flatMap((r) => r.detail.refused);
      // One entry; or two when the 96 MiB arrived more than 10 s after the first refusal, when
      // an association's waiting refusals are audited without waiting for its end
      // (AUDIT_DELAY_MS in cstore-scp.listener.ts): a slow CI machine wrote the three, then the
      // fourth. Each refused data set is named once either way (below).
      expect(rows.length).toBeGreaterThanOrEqual(1);
      expect(rows.length).toBeLessThanOrEqual(2);
      // Every refused data set kept on disk is named by the audit entry: before, the one whose
      // intake was running at the stop was kept, and its entry lost.
      const kept = readdirSync(refusedDir).map((name) => name.replace(/\.dcm$/, ''));
      expect(kept.sort()).toEqual(refused.map((r) => r.keptAs).sort());
      if (refused.length === 4) {
        // the usual case: the fourth was in intake when the stop began, and is audited
        expect(refused.filter((r) => r.sizeBytes > size)).toHaveLength(1);
      } else {
        // A slow machine: its last PDU was on disk but not yet handed over when the connection
        // closed. It was never answered (the modality sends it again) and its part file goes.
        expect(refused).toHaveLength(3);
        for (let i = 0; i < 100 && readdirSync(incoming).length > 0; i++)
          await new Promise((r) => setTimeout(r, 20));
        expect(readdirSync(incoming)).toEqual([]);
      }
    } finally {
      socket.destroy();
      await adapter?.close();
      await db.drop();
    }
  });
});

/**
 * The PACS we move from (its calling AE is PACS_DIMSE_AE_TITLE, and an AE title is no
 * credential) sending sub-operations of "our" C-MOVE that our SCP refuses. Each refusal left a
 * note `moved/<study>/<uuid>.refused` for the retrieve, for any study and without a limit:
 * sub-operations nobody asked for, or thousands of one study, were thousands of files (inodes,
 * and a listing each retrieve reads whole) until the hourly sweep.
 */
describe('hostile: refused C-MOVE sub-operations from the move source', () => {
  const PACS_AE = 'PACS-MOVESRC';
  const scp = scpAdapter({
    PACS_DIMSE_HOST: '127.0.0.1',
    PACS_DIMSE_PORT: '104',
    PACS_DIMSE_AE_TITLE: PACS_AE,
  });

  /** `count` instances of one study, each with its pixel data cut short (refused A900), as files. */
  const refusedInstances = (count: number, label: string) => {
    const study = createMrBrainStudy({
      study: { accessionNumber: `MOVED-${label}` },
      series: [{ slices: count }],
    });
    const files = study.map((inst, i) => {
      const file = join(scp.dir, `${label}-${i}.dcm`);
      writeFileSync(file, shortPixelData(inst.bytes, 100));
      return file;
    });
    return { uid: study[0]!.studyInstanceUid, files };
  };

  /** The files as C-STORE sub-operations of our move, on one association; their statuses. */
  const moveSubOperations = (files: string[]) =>
    new Promise<number[]>((resolve, reject) => {
      const client = new Client();
      const statuses: number[] = [];
      for (const file of files) {
        const req = new requests.CStoreRequest(file);
        req.getCommandDataset().setElement('MoveOriginatorApplicationEntityTitle', AE);
        req.on('response', (r) => statuses.push(r.getStatus()));
        client.addRequest(req);
      }
      client.on('networkError', reject);
      client.on('closed', () => resolve(statuses));
      client.send('127.0.0.1', scp.port, PACS_AE, AE);
    });

  const notes = (uid: string) => {
    const dir = new StudyStoragePaths(scp.adapter.dataDir).movedDir(uid);
    return existsSync(dir) ? readdirSync(dir).filter((n) => n.endsWith('.refused')) : [];
  };

  it('of a study no retrieve is moving: refused and audited, no note; of one being moved: at most 20 notes', async () => {
    const stray = refusedInstances(25, 'STRAY');
    expect(await moveSubOperations(stray.files)).toEqual(stray.files.map(() => 0xa900));
    expect(notes(stray.uid)).toEqual([]);
    // Still refused and audited as before (the bytes of the first ones kept).
    // … in one entry for the association, as any sender's refusals are: each was an entry of
    // its own (written at once for a retrieve to read, though none was under way)
    const audited = (await scp.adapter.dataSource.query(
      `SELECT count(*)::int AS entries,
              coalesce(sum(jsonb_array_length(detail->'refused')), 0)::int AS n FROM audit_events
        WHERE kind = 'study.received' AND actor = $1`,
      [`dicom:${PACS_AE}`],
    )) as Array<{ entries: number; n: number }>;
    expect(audited[0]).toEqual({ entries: 1, n: 25 });

    // A retrieve of this study under way (its order's acquisition holds the lease, source dimse).
    const moving = refusedInstances(25, 'MOVING');
    const orderId = await insertOrder(scp.adapter.dataSource, { studyInstanceUid: moving.uid });
    await scp.adapter.dataSource.query(
      `INSERT INTO study_acquisitions (order_id, state, source, study_instance_uid, lease_until)
       VALUES ($1, 'waiting', 'dimse', $2, now() + interval '5 minutes')`,
      [orderId, moving.uid],
    );
    expect(await moveSubOperations(moving.files)).toEqual(moving.files.map(() => 0xa900));
    expect(notes(moving.uid)).toHaveLength(20);
  });

  it('valid sub-operations of a study no retrieve is moving are refused 0124, nothing filed under moved/; of one being moved, filed', async () => {
    // They were filed under moved/<study>/ for any study and without limit, swept an hour
    // after the last: a peer calling with the PACS's AE title filled DATA_DIR with files no
    // retrieve would ever take (a late one of a move that broke off is not taken either).
    const files = (count: number, label: string) => {
      const study = createMrBrainStudy({
        study: { accessionNumber: `MOVED-OK-${label}` },
        series: [{ slices: count }],
      });
      return {
        uid: study[0]!.studyInstanceUid,
        files: study.map((inst, i) => {
          const file = join(scp.dir, `ok-${label}-${i}.dcm`);
          writeFileSync(file, inst.bytes);
          return file;
        }),
      };
    };
    const paths = new StudyStoragePaths(scp.adapter.dataDir);
    const stray = files(5, 'STRAY');
    expect(await moveSubOperations(stray.files)).toEqual(stray.files.map(() => 0x0124));
    expect(existsSync(paths.movedDir(stray.uid))).toBe(false);
    // audited with the association's refusals, named as such
    const [entry] = (await scp.adapter.dataSource.query(
      `SELECT detail FROM audit_events WHERE kind = 'study.received' AND actor = $1
        ORDER BY id DESC LIMIT 1`,
      [`dicom:${PACS_AE}`],
    )) as Array<{ detail: { refused: Array<{ failureReason: number; reason: string }> } }>;
    expect(entry!.detail.refused).toHaveLength(5);
    expect(entry!.detail.refused[0]).toMatchObject({
      failureReason: 0x0124,
      reason: 'a C-MOVE sub-operation of a study no retrieve of ours is moving',
    });

    const moving = files(3, 'MOVING');
    const orderId = await insertOrder(scp.adapter.dataSource, { studyInstanceUid: moving.uid });
    await scp.adapter.dataSource.query(
      `INSERT INTO study_acquisitions (order_id, state, source, study_instance_uid, lease_until)
       VALUES ($1, 'waiting', 'dimse', $2, now() + interval '5 minutes')`,
      [orderId, moving.uid],
    );
    expect(await moveSubOperations(moving.files)).toEqual([0, 0, 0]);
    expect(readdirSync(paths.movedDir(moving.uid)).filter((n) => n.endsWith('.dcm'))).toHaveLength(
      3,
    );
  });
});
