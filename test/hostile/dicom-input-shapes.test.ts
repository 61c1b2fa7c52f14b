import { monitorEventLoopDelay } from 'node:perf_hooks';
import { gzipSync } from 'node:zlib';
import { request } from 'undici';
import { STUDY_ACQUIRER, type StudyAcquirer } from '../../src/domain/study-acquirer.port';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { createMrBrainSeries, generateUid } from '../helpers/dicom-factory';
import { element, nestedSequences, rawInstance, type RawInstance } from '../helpers/raw-dicom';
import { multipartRelated, stowToAdapter } from '../studies/study-test-support';

/** ISO 8859-5 (Cyrillic) bytes of `text`: U+0410-U+044F are 0xB0-0xEF, ASCII as it is. */
function iso8859_5(text: string): Buffer {
  return Buffer.from(
    [...text].map((c) => (c.charCodeAt(0) < 0x80 ? c.charCodeAt(0) : c.charCodeAt(0) - 0x360)),
  );
}

type DicomJson = Record<string, { Value?: Array<Record<string, { Value: unknown[] }>> }>;

/**
 * Real-world and hostile DICOM shapes pushed by STOW-RS into a running adapter: studies of
 * Japanese and Korean sites (ISO 2022 code extensions, PS3.5 Annexes H and I), identifiers
 * holding two values, and sequences nested thousands deep.
 */
describe('hostile: DICOM instances that real sites and attackers send', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false', STUDY_QUIET_PERIOD_SECONDS: '1' });
  });
  afterAll(async () => adapter?.close());

  const stow = async (instances: Array<RawInstance | { bytes: Buffer }>) => {
    const res = await stowToAdapter(adapter.httpUrl, instances);
    return { status: res.status, json: res.json as DicomJson };
  };

  const order = async (ids: { study: string; accession: string; patientId: string }) => {
    const rows = (await adapter.dataSource.query(
      `INSERT INTO orders (source, state, request, accession_number, patient_id, study_instance_uid)
       VALUES ('api', 'placed', '{}'::jsonb, $1, $2, $3) RETURNING id`,
      [ids.accession, ids.patientId, ids.study],
    )) as Array<{ id: string }>;
    return { orderId: rows[0]!.id, ...ids };
  };

  const acquire = async (o: {
    orderId: string;
    study: string;
    accession: string;
    patientId: string;
  }) => {
    const acquirer = adapter.app.get<StudyAcquirer>(STUDY_ACQUIRER);
    const req = {
      orderId: o.orderId,
      studyInstanceUid: o.study,
      accessionNumber: o.accession,
      patientId: o.patientId,
    };
    let result = await acquirer.acquire(req);
    for (let i = 0; i < 20 && result.status === 'waiting'; i++) {
      await new Promise((r) => setTimeout(r, 250));
      result = await acquirer.acquire(req);
    }
    return result;
  };

  /** One instance of a new order's study with this name and Study Description; both as stored. */
  const storedNameAndDescription = async (
    prefix: string,
    text: { charset?: string; patientName: string; description: string },
  ) => {
    const o = await order({
      study: generateUid(),
      accession: `${prefix}-${Date.now() % 1e9}`,
      patientId: `PID-${prefix}`,
    });
    const res = await stow([
      rawInstance({
        studyInstanceUid: o.study,
        ...(text.charset !== undefined ? { charset: text.charset } : {}),
        patientName: text.patientName,
        accession: o.accession,
        patientId: `PID-${prefix}`,
        beforePatient: element(0x0008, 0x1030, 'LO', text.description),
      }),
    ]);
    expect(res.status).toBe(200);
    return (await adapter.dataSource.query(
      `SELECT header->>'patientName' AS name, header->>'studyDescription' AS description
         FROM study_instances WHERE study_instance_uid = $1`,
      [o.study],
    )) as Array<{ name: string; description: string }>;
  };

  it.each([
    [
      'Japanese (PS3.5 H.3.1)',
      '\\ISO 2022 IR 87',
      'Yamada^Tarou=\x1b$B;3ED\x1b(B^\x1b$BB@O:\x1b(B=\x1b$B$d$^$@\x1b(B^\x1b$B$?$m$&\x1b(B',
      'Yamada^Tarou',
    ],
    [
      'Japanese, katakana first (PS3.5 H.3.2)',
      'ISO 2022 IR 13\\ISO 2022 IR 87',
      '\xd4\xcf\xc0\xde^\xc0\xdb\xb3=\x1b$B;3ED\x1b(J^\x1b$BB@O:\x1b(J',
      'ﾔﾏﾀﾞ^ﾀﾛｳ',
    ],
    [
      'Japanese, ideographic and phonetic groups only',
      '\\ISO 2022 IR 87',
      '=\x1b$B;3ED\x1b(B^\x1b$BB@O:\x1b(B=\x1b$B$d$^$@\x1b(B^\x1b$B$?$m$&\x1b(B',
      '=山田^太郎=やまだ^たろう',
    ],
    [
      'Korean (PS3.5 I.2)',
      '\\ISO 2022 IR 149',
      'Hong^Gildong=\x1b$)C\xfb\xf3^\x1b$)C\xd1\xce\xd4\xd7=\x1b$)C\xc8\xab^\x1b$)C\xb1\xe6\xb5\xbf',
      'Hong^Gildong',
    ],
  ])(
    'a %s study with code extensions is stored, matched and packaged',
    async (_label, charset, patientName, alphabetic) => {
      const o = await order({
        study: generateUid(),
        accession: `CS-${Date.now() % 1e9}`,
        patientId: 'PID-77',
      });
      const instances = [1, 2].map(() =>
        rawInstance({
          studyInstanceUid: o.study,
          charset,
          patientName,
          accession: o.accession,
          patientId: 'PID-77',
        }),
      );
      const res = await stow(instances);
      expect(res.status).toBe(200);
      expect(res.json['00081199']?.Value).toHaveLength(2);
      const rows = (await adapter.dataSource.query(
        `SELECT header->>'patientName' AS name FROM study_instances WHERE study_instance_uid = $1`,
        [o.study],
      )) as Array<{ name: string }>;
      expect(rows.map((r) => r.name)).toEqual([alphabetic, alphabetic]);
      expect(await acquire(o)).toMatchObject({ status: 'ready' });
    },
  );

  it.each([
    ['ESC $ @ (JIS C 6226-1978, which iso-2022-jp readers take)', '\x1b$@', '\x1b(B'],
    ['ESC & @ ESC $ B (JIS X 0208-1990)', '\x1b&@\x1b$B', '\x1b(B'],
  ])(
    'a Japanese study of an older writer designating kanji by %s: read as kanji, no stray characters',
    async (_label, kanji, ascii) => {
      const rows = await storedNameAndDescription('JP', {
        charset: '\\ISO 2022 IR 87',
        patientName: `=${kanji};3ED${ascii}^${kanji}B@O:${ascii}`,
        description: `${kanji}F,It${ascii} MRI`,
      });
      // Before: the escape sequence was not known, the kanji bytes read as ASCII.
      expect(rows).toEqual([{ name: '=山田^太郎', description: '頭部 MRI' }]);
    },
  );

  it('a Japanese study with ISO 2022 escape sequences but no Specific Character Set: read as kanji, not as the escape bytes', async () => {
    // (0008,0005) left out by a writer that uses ISO 2022 IR 87 all the same (the PS3.5 H.3.1
    // name, its alphabetic group empty as some Japanese sites write it). Only ASCII is allowed
    // without the attribute, and in ASCII an ESC means nothing: the escape sequences can only
    // be what they are in ISO 2022.
    const rows = await storedNameAndDescription('JPU', {
      patientName: '=\x1b$B;3ED\x1b(B^\x1b$BB@O:\x1b(B=\x1b$B$d$^$@\x1b(B^\x1b$B$?$m$&\x1b(B',
      description: '\x1b$BF,It\x1b(B MRI',
    });
    // Before: `=\x1b$B;3ED\x1b(B^…` kept as it was (and written so into our SR).
    expect(rows).toEqual([{ name: '=山田^太郎=やまだ^たろう', description: '頭部 MRI' }]);
  });

  it('a Korean study declaring ISO 2022 IR 149 without its escape sequences (as many Korean devices write it): names and descriptions read as Korean', async () => {
    // PS3.5 I.2 requires ESC $ ) C before the first KS X 1001 character of a value; files of
    // Korean sites often leave it out, the bytes being EUC-KR as they stand (vtk-dicom reads
    // them so). A name written in Hangul in its alphabetic group, and a study
    // description in Hangul.
    const rows = await storedNameAndDescription('KR', {
      charset: '\\ISO 2022 IR 149',
      patientName: '\xc8\xab^\xb1\xe6\xb5\xbf',
      description: '\xb3\xfa MRI',
    });
    // Before: read as Latin-1, `È«^±æµ¿` and `³ú MRI`, and so written into our SR.
    expect(rows).toEqual([{ name: '홍^길동', description: '뇌 MRI' }]);
  });

  it.each([
    ['ISO-IR 192', 'utf8'],
    ['ISO_IR192', 'utf8'],
    ['ISO IR 144', 'iso-8859-5'],
    ['UTF-8', 'utf8'],
  ] as const)(
    'a Specific Character Set spelt "%s" (a misspelt term) is read as the set it names: the patient matches, the name is not mojibake',
    async (charset, encoding) => {
      // Terms seen in real files next to the defined ones (pydicom corrects the same
      // spellings): a hyphen or no space for the underscore, or the encoding's own name.
      const name = encoding === 'utf8' ? 'Müller^Jürgen' : 'Иванов^Иван';
      const patientId = encoding === 'utf8' ? 'PÄT-77' : 'ПАЦ-77';
      const raw = (v: string) =>
        (encoding === 'utf8' ? Buffer.from(v, 'utf8') : iso8859_5(v)).toString('latin1');
      const o = await order({
        study: generateUid(),
        accession: `CSM-${Date.now() % 1e9}`,
        patientId,
      });
      const res = await stow([
        rawInstance({
          studyInstanceUid: o.study,
          charset,
          patientName: raw(name),
          accession: o.accession,
          patientId: raw(patientId),
        }),
      ]);
      expect(res.status).toBe(200);
      const rows = (await adapter.dataSource.query(
        `SELECT header->>'patientName' AS name, header->>'patientId' AS pid
           FROM study_instances WHERE study_instance_uid = $1`,
        [o.study],
      )) as Array<{ name: string; pid: string }>;
      // Before: read as Latin-1, `MÃ¼ller^JÃ¼rgen` (written so into our SR) and a Patient ID
      // that matched no order: the study refused as another patient's.
      expect(rows).toEqual([{ name, pid: patientId }]);
      expect(await acquire(o)).toMatchObject({ status: 'ready' });
    },
  );

  it.each([
    ['ISO_IR 100', 'Müller^Jürgen', 'PÄT-78', 'utf8'],
    ['ISO_IR 100', 'Müller^Jürgen', 'PÄT-79', 'latin1'],
    ['ISO_IR 101', 'Świątek^Łucja', 'PŁ-78', 'utf8'],
  ] as const)(
    'a study declaring %s, its name %s and Patient ID %s in %s bytes: read as the bytes are, the patient matches',
    async (charset, name, patientId, encoding) => {
      // dcmjs (and other writers) encode UTF-8 whatever (0008,0005) says: a modality or
      // gateway declaring ISO_IR 100 over UTF-8 bytes. Real Latin-1 text is practically never
      // valid UTF-8 with multi-byte sequences, so those bytes are UTF-8 (as for HL7 MSH-18).
      const raw = (v: string) => Buffer.from(v, encoding).toString('latin1');
      const o = await order({
        study: generateUid(),
        accession: `CSU-${Date.now() % 1e9}`,
        patientId,
      });
      const res = await stow([
        rawInstance({
          studyInstanceUid: o.study,
          charset,
          patientName: raw(name),
          accession: o.accession,
          patientId: raw(patientId),
        }),
      ]);
      expect(res.status).toBe(200);
      const rows = (await adapter.dataSource.query(
        `SELECT header->>'patientName' AS name, header->>'patientId' AS pid
           FROM study_instances WHERE study_instance_uid = $1`,
        [o.study],
      )) as Array<{ name: string; pid: string }>;
      // Before: read as declared, `MÃ¼ller^JÃ¼rgen` and `PÃ\u0084T-78`: the study refused as
      // another patient's.
      expect(rows).toEqual([{ name, pid: patientId }]);
      expect(await acquire(o)).toMatchObject({ status: 'ready' });
    },
  );

  it('an order whose accession and Patient ID are decomposed (NFD, as macOS and some engines write Ö) and a Latin-1 study of the same exam: the study is the order’s; another letter is not', async () => {
    // The worklist gave the modality the text in ISO 8859-1, which has only the composed Ö:
    // the same characters (Unicode canonical equivalence), other code points.
    const suffix = Date.now() % 1e9;
    const o = await order({
      study: generateUid(),
      accession: `KO\u0308LN-${suffix}`,
      patientId: 'PA\u0308T-80',
    });
    const res = await stow([
      rawInstance({
        studyInstanceUid: o.study,
        charset: 'ISO_IR 100',
        accession: `K\xd6LN-${suffix}`,
        patientId: 'P\xc4T-80',
      }),
    ]);
    expect(res.status).toBe(200);
    // Before: compared code point by code point, the right study was refused as another's.
    expect(await acquire(o)).toMatchObject({ status: 'ready' });
    // Equivalence is not likeness: KÓLN (Ó, another letter) stays another exam.
    const other = await order({
      study: generateUid(),
      accession: `KO\u0308LN-${suffix + 1}`,
      patientId: 'PA\u0308T-81',
    });
    await stow([
      rawInstance({
        studyInstanceUid: other.study,
        charset: 'ISO_IR 100',
        accession: `K\xd3LN-${suffix + 1}`,
        patientId: 'P\xc4T-81',
      }),
    ]);
    expect(await acquire(other)).not.toMatchObject({ status: 'ready' });
  });

  it('an MR series from the test factory with umlauts in name, ID and description: stored as written, matched, packaged', async () => {
    // The factory declared ISO_IR 100 over dcmjs's UTF-8 bytes: this study would have been
    // stored as `MÃ¼ller^JÃ¼rgen` and refused as another patient's. It now declares ISO_IR 192.
    const o = await order({
      study: generateUid(),
      accession: `UML-${Date.now() % 1e9}`,
      patientId: 'PÄT-4711',
    });
    const series = createMrBrainSeries({
      patient: { patientId: 'PÄT-4711', patientName: 'Müller^Jürgen', sex: 'M' },
      study: {
        studyInstanceUid: o.study,
        accessionNumber: o.accession,
        studyDescription: 'MRT Schädel nativ',
        institutionName: 'Klinikum Süd',
      },
      series: { slices: 2 },
    });
    const res = await stow(series);
    expect(res.status).toBe(200);
    const rows = (await adapter.dataSource.query(
      `SELECT DISTINCT header->>'patientName' AS name, header->>'patientId' AS pid,
              header->>'studyDescription' AS description
         FROM study_instances WHERE study_instance_uid = $1`,
      [o.study],
    )) as Array<{ name: string; pid: string; description: string }>;
    expect(rows).toEqual([
      { name: 'Müller^Jürgen', pid: 'PÄT-4711', description: 'MRT Schädel nativ' },
    ]);
    expect(await acquire(o)).toMatchObject({ status: 'ready' });
  });

  it.each([
    ['Accession Number', { accession: 'ACC-TWO-1\\ACC-TWO-2', patientId: 'PID-88' }],
    ['Patient ID', { accession: 'ACC-TWO-1', patientId: 'PID-88\\PID-99' }],
  ])(
    'a study whose %s holds two values is not the order of the first one: never packaged',
    async (_label, ids) => {
      const o = await order({ study: generateUid(), accession: 'ACC-TWO-1', patientId: 'PID-88' });
      const res = await stow([
        rawInstance({ studyInstanceUid: o.study, patientName: 'Doe^Jane', ...ids }),
      ]);
      expect(res.status).toBe(200);
      expect(await acquire(o)).toMatchObject({
        status: 'failed',
        alert: 'study-identity-mismatch',
      });
    },
  );

  it.each([
    [
      'explicit VR items, as the vendor wrote them before a router relabelled the sequence UN',
      true,
    ],
    ['implicit VR items, as PS3.5 §6.2.2 (CP-246) wants them', false],
  ])(
    'a private sequence relabelled UN of undefined length holding %s: the instance is stored',
    async (_label, explicitItems) => {
      // A router or archive that does not know a vendor's private sequence rewrites its VR as
      // UN and keeps its undefined length and its items as they were, in explicit VR; pydicom
      // reads such items as explicit when they look so, DCMTK on an option (dcmdump -ui).
      const item = explicitItems
        ? Buffer.concat([
            element(0x0009, 0x1011, 'LO', 'VENDOR DATA'),
            element(0x0009, 0x1012, 'US', Buffer.from([1, 0])),
          ])
        : Buffer.from([0x09, 0x00, 0x11, 0x10, 12, 0, 0, 0, ...Buffer.from('VENDOR DATA ')]);
      const undefinedLength = [0xff, 0xff, 0xff, 0xff];
      const relabelled = Buffer.concat([
        element(0x0009, 0x0010, 'LO', 'ACME 1.0'),
        Buffer.from([0x09, 0x00, 0x10, 0x10, 0x55, 0x4e, 0, 0, ...undefinedLength]),
        Buffer.from([0xfe, 0xff, 0x00, 0xe0, ...undefinedLength]),
        item,
        Buffer.from([0xfe, 0xff, 0x0d, 0xe0, 0, 0, 0, 0]),
        Buffer.from([0xfe, 0xff, 0xdd, 0xe0, 0, 0, 0, 0]),
      ]);
      const o = await order({
        study: generateUid(),
        accession: `UN-${Date.now() % 1e9}`,
        patientId: 'PID-UN',
      });
      const res = await stow([
        rawInstance({
          studyInstanceUid: o.study,
          accession: o.accession,
          patientId: 'PID-UN',
          beforePatient: relabelled,
        }),
      ]);
      // Before (explicit items): 409, C000 "an element is longer than the bytes that follow
      // it", and the order failed on a study of such instances.
      expect(res.status).toBe(200);
      expect(await acquire(o)).toMatchObject({ status: 'ready' });
    },
  );

  it('a gzip-encoded STOW-RS body is 415 naming the coding, not 400 "no boundary"', async () => {
    const o = { study: generateUid() };
    const { body, contentType } = multipartRelated([
      { contentType: 'application/dicom', data: rawInstance({ studyInstanceUid: o.study }).bytes },
    ]);
    const res = await request(`${adapter.httpUrl}/dicomweb/studies`, {
      method: 'POST',
      headers: {
        'content-type': contentType,
        'content-encoding': 'gzip',
        authorization: `Bearer ${TEST_TOKENS.sender}`,
      },
      body: gzipSync(body),
    });
    const problem = (await res.body.json()) as { status: number; detail: string };
    expect(res.statusCode).toBe(415);
    expect(res.headers['accept-encoding']).toBe('identity');
    expect(problem.detail).toMatch(/Content-Encoding gzip is not supported/);
    const rows = (await adapter.dataSource.query(
      'SELECT 1 FROM study_instances WHERE study_instance_uid = $1',
      [o.study],
    )) as unknown[];
    expect(rows).toHaveLength(0);
  });

  it('sequences nested 1,000 deep around 1 MB are refused at once, without blocking the process', async () => {
    const hostile = rawInstance({
      accession: 'NEST-1',
      beforePatient: nestedSequences(1000, element(0x0009, 0x1001, 'UN', Buffer.alloc(1 << 20))),
    });
    // Real-world nesting (an SR content tree, an icon image in a referenced image item).
    const deepButReal = rawInstance({
      accession: 'NEST-2',
      beforePatient: nestedSequences(30, element(0x0009, 0x1001, 'UN', Buffer.alloc(1 << 20))),
    });
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    const started = Date.now();
    const res = await stow([hostile, deepButReal]);
    const elapsed = Date.now() - started;
    delay.disable();
    expect(res.status).toBe(202);
    expect(res.json['00081198']?.Value?.map((v) => v['00081155']?.Value?.[0])).toEqual([undefined]);
    expect(res.json['00081198']?.Value?.[0]?.['00081197']?.Value).toEqual([0xc000]);
    expect(res.json['00081199']?.Value?.[0]?.['00081155']?.Value).toEqual([
      deepButReal.sopInstanceUid,
    ]);
    // Before: dcmjs scanned and copied each undefined-length item once per level (seconds of
    // a blocked event loop, hundreds of MiB), then overflowed the stack.
    expect(elapsed).toBeLessThan(3000);
    expect(delay.max / 1e6).toBeLessThan(1000);
    const events = (await adapter.dataSource.query(
      `SELECT detail FROM audit_events WHERE kind = 'study.received' ORDER BY id DESC LIMIT 1`,
    )) as Array<{ detail: { refused: Array<{ reason: string }> } }>;
    expect(events[0]!.detail.refused[0]!.reason).toMatch(/nested deeper than/);
  });

  it('a NUL-terminated accession padded with a SPACE is the order’s; a NUL inside a value is stored, never a 500', async () => {
    // A writer that copies a C string with its terminator (`ACC1\0`, odd) and pads it to even
    // length with a SPACE (PS3.5 §6.2) writes `ACC1\0 `; others leave a NUL inside a name
    // (`Doe\0^Jane`). Before: PostgreSQL refused the NUL, the whole STOW-RS request got 500
    // and the other instances in it were lost with it.
    const accession = `NUL-${Date.now() % 1e9}`;
    const o = await order({ study: generateUid(), accession, patientId: 'PID-NUL' });
    const terminated = rawInstance({
      studyInstanceUid: o.study,
      accession: `${accession}\0 `,
      patientId: 'PID-NUL\0',
      patientName: 'Doe\0^Jane',
    });
    const inner = rawInstance({ accession: `${accession.slice(0, 5)}\0${accession.slice(5)}` });
    const res = await stow([terminated, inner]);
    expect(res.status).toBe(200);
    expect(res.json['00081199']?.Value).toHaveLength(2);
    const rows = (await adapter.dataSource.query(
      `SELECT sop_instance_uid, order_id, accession_number, header->>'patientName' AS name
         FROM study_instances WHERE sop_instance_uid = ANY($1)`,
      [[terminated.sopInstanceUid, inner.sopInstanceUid]],
    )) as Array<{
      sop_instance_uid: string;
      order_id: string | null;
      accession_number: string;
      name: string | null;
    }>;
    const byUid = new Map(rows.map((r) => [r.sop_instance_uid, r]));
    expect(byUid.get(terminated.sopInstanceUid)).toMatchObject({
      order_id: o.orderId,
      accession_number: accession,
      name: 'Doe\ufffd^Jane',
    });
    // The NUL inside makes another accession: stored, held, matched to no order.
    expect(byUid.get(inner.sopInstanceUid)).toMatchObject({
      order_id: null,
      accession_number: `${accession.slice(0, 5)}\ufffd${accession.slice(5)}`,
    });
    expect(await acquire(o)).toMatchObject({ status: 'ready' });
  });

  it('values with long runs of padding inside are read in linear time, the process answering meanwhile', async () => {
    // Fixed-width fields padded with SPACEs (or a PN's carets) are common; a value holding a
    // run of 65,000 of them before another character (one SH/LO/PN element's length allows
    // it) made each trailing-padding regular expression retry from every position: seconds
    // of a blocked event loop per attribute, per instance.
    const run = (c: string) => `x${c.repeat(65_000)}x`;
    const hostile = rawInstance({
      accession: run(' '),
      patientId: run(' '),
      patientName: run('^'),
      beforePatient: element(0x0008, 0x1030, 'LO', run(' ')),
    });
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    const res = await stow([hostile]);
    delay.disable();
    expect(res.status).toBe(200);
    expect(delay.max / 1e6).toBeLessThan(1000);
  });
});
