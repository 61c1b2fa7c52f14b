import { leadingMetaElements } from './dataset-meta-elements';

/** One explicit VR element (short length form), little or big endian. */
function explicit(group: number, elem: number, vr: string, value: string, be = false): Buffer {
  const v = Buffer.from(value.length % 2 ? `${value}\0` : value, 'latin1');
  const h = Buffer.alloc(8);
  if (be) {
    h.writeUInt16BE(group, 0);
    h.writeUInt16BE(elem, 2);
    h.writeUInt16BE(v.length, 6);
  } else {
    h.writeUInt16LE(group, 0);
    h.writeUInt16LE(elem, 2);
    h.writeUInt16LE(v.length, 6);
  }
  h.write(vr, 4, 'latin1');
  return Buffer.concat([h, v]);
}

describe('leadingMetaElements', () => {
  const meta = (be = false) =>
    Buffer.concat([
      explicit(0x0002, 0x0010, 'UI', '1.2.840.10008.1.2.1', be),
      explicit(0x0002, 0x0013, 'SH', 'OLD', be),
    ]);
  const patient = (be = false) => explicit(0x0010, 0x0020, 'LO', 'P1', be);

  it.each([
    ['explicit-le', false],
    ['explicit-be', true],
  ] as const)('finds the run of group 0002 elements before the data set (%s)', (enc, be) => {
    const bytes = Buffer.concat([meta(be), patient(be)]);
    expect(leadingMetaElements(bytes, enc, false)).toEqual({ end: meta(be).length, elements: 2 });
  });

  it('reads implicit VR lengths (32-bit, no VR)', () => {
    const el = Buffer.alloc(8 + 20);
    el.writeUInt16LE(0x0002, 0);
    el.writeUInt16LE(0x0010, 2);
    el.writeUInt32LE(20, 4);
    const pid = Buffer.from([0x10, 0, 0x20, 0, 2, 0, 0, 0, 0x50, 0x31]);
    expect(leadingMetaElements(Buffer.concat([el, pid]), 'implicit-le', false)).toEqual({
      end: 28,
      elements: 1,
    });
  });

  it('a data set without them is left whole; a cut-short run asks for more', () => {
    expect(leadingMetaElements(patient(), 'explicit-le', false)).toEqual({ end: 0, elements: 0 });
    expect(leadingMetaElements(meta().subarray(0, 10), 'explicit-le', false)).toBe('need-more');
    expect(leadingMetaElements(meta(), 'explicit-le', false)).toBe('need-more');
    expect(leadingMetaElements(meta(), 'explicit-le', true)).toEqual({
      end: meta().length,
      elements: 2,
    });
  });
});
