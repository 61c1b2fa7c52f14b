import { encodeSegment } from '../hl7/hl7-builder';
import { encodeText, writesAs } from '../hl7/hl7-charset';
import type { Hl7Message } from '../hl7/hl7-message';
import { encodeObx, obxLines } from './hl7-result.obx';
import { charsetFor, msh, obr, orc, pidOf, pv1Of, UTF8_CHARSET } from './hl7-result.segments';
import type { PublicationInput } from './publication.model';

/**
 * ORU^R01 (HL7 v2.5.1 chapter 7.3.1) and the optional ORM^O01 status message (ORC-1 SC,
 * chapter 4.4.1) for one publication. MSH is in the site's version (the original order's
 * MSH-12 unless configured), PID and PV1 are the original order's segments as received, and
 * every value we write goes through the builder's escaping (v2.5.1 section 2.7).
 */
export interface Hl7ResultSettings {
  sendingApplication: string;
  sendingFacility: string;
  /** MSH-12 when the order did not come over HL7 (or to force one). */
  defaultVersion: string;
  forceVersion?: string;
  /** OBX-2 of the text report: TX (one repetition per line) or FT. */
  textType: 'TX' | 'FT';
}

export interface BuiltHl7 {
  controlId: string;
  text: string;
  /** The wire bytes, in the character set MSH-18 names. */
  bytes: Buffer;
  version: string;
  /** Values written shorter than the order holds them (PHI-free: where, how long, the type). */
  cuts: string[];
}

/** Builds one outbound message for a publication, in reply to the original order when it came over HL7. */
export type Hl7MessageBuilder = (
  input: PublicationInput,
  original: Hl7Message | undefined,
  settings: Hl7ResultSettings,
  controlId: string,
  now: Date,
) => BuiltHl7;

/**
 * A message of `type`: MSH, PID and PV1, then its own segments (`body`, which may depend on
 * the MSH-12 version chosen), as wire text and as bytes in the MSH-18 character set.
 */
function messageOf(
  type: 'ORU' | 'ORM',
  body: (
    input: PublicationInput,
    now: Date,
    version: string,
    settings: Hl7ResultSettings,
    original: Hl7Message | undefined,
    cuts: string[],
  ) => string[],
): Hl7MessageBuilder {
  const write = (
    charset: string,
    ...[input, original, settings, controlId, now]: Parameters<Hl7MessageBuilder>
  ): BuiltHl7 => {
    const head = msh(original, settings, type, controlId, now, charset);
    const cuts: string[] = [];
    const lines = [
      encodeSegment(head.spec),
      pidOf(input, original, charset, cuts),
      pv1Of(original, charset),
      ...body(input, now, head.version, settings, original, cuts),
    ];
    const text = lines.join('\r') + '\r';
    return {
      controlId,
      text,
      bytes: encodeText(text, charset, original?.encoding),
      version: head.version,
      cuts,
    };
  };
  return (...args) => {
    const built = write(charsetFor(args[1]), ...args);
    // The order's charset cannot carry this text (MSH-18 ASCII, but a name the sender wrote in
    // 8-bit bytes, or an upstream text beyond ASCII): UTF-8, and MSH-18 says so. Before, the
    // bytes were Latin-1 under MSH-18 ASCII (Müller from a UTF-8 sender came back M\xFCller).
    return writesAs(charsetFor(args[1]), built.text) ? built : write(UTF8_CHARSET, ...args);
  };
}

/** ORU^R01 with ORC/OBR per the row and the OBX lines of the outcome (results or why none). */
export const buildOru = messageOf('ORU', (input, now, version, settings, original, cuts) => [
  encodeSegment(orc(input, input.row.hl7.orderControl, input.row.hl7.orderStatus, now, original)),
  encodeSegment(obr(input, now, original, cuts)),
  ...obxLines(input, version, settings).map((s) => encodeObx(s)),
]);

/** ORM^O01 with ORC-1 SC and ORC-5 per the row: an intermediate status for the RIS worklist. */
export const buildOrmStatus = messageOf(
  'ORM',
  (input, now, _version, _settings, original, cuts) => {
    const spec = obr(input, now, original, cuts);
    return [
      encodeSegment(orc(input, 'SC', input.row.hl7.orderStatus, now, original)),
      encodeSegment({ ...spec, fields: spec.fields.slice(0, 25) }),
    ];
  },
);
