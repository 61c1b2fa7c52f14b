import { notMapped, ofValue, storedAs, type TransformFn } from './hl7-value.kit';
import { offsetInZone } from '../common/time-zone';

/** Dates and timestamps (DT, DTM; chapter 2A) → ISO 8601. */

function validDate(y: number, m?: number, d?: number): boolean {
  // year 0000 is no ISO 8601 / R4 year (it would reach a DiagnosticReport's effectiveDateTime)
  if (y < 1) return false;
  if (m === undefined) return y >= 1800 && y <= 2999;
  if (m < 1 || m > 12) return false;
  if (d === undefined) return true;
  const days = new Date(Date.UTC(y, m, 0)).getUTCDate();
  return d >= 1 && d <= days;
}

/**
 * A UTC offset of a DTM (`+HHMM`/`-HHMM`) that exists: -12:00 to +14:00, minutes below 60
 * (the range ISO 8601 dateTimes take in FHIR and PostgreSQL; `+2400` or `-0075` is none).
 */
function validOffset(offset: string): boolean {
  const hh = Number(offset.slice(1, 3));
  const mm = Number(offset.slice(3, 5));
  if (mm > 59) return false;
  const minutes = hh * 60 + mm;
  return offset.startsWith('-') ? minutes <= 12 * 60 : minutes <= 14 * 60;
}

/**
 * DT, or the date of a DTM (PID-7 is a DTM since v2.5), → ISO 8601 date or partial date,
 * precision kept. The whole value must be a DT/DTM: `1970-01-01` is not read as `1970`.
 */
export const partialDate: TransformFn = ofValue((value, source, input) => {
  const iso = hl7DateOf(value);
  if (iso === undefined) {
    input.quirks.add('invalid-date', `${source} is not an HL7 date`);
    return notMapped(source, 102, `${source} not a valid date`);
  }
  return storedAs(source, value, iso, 'HL7 DT');
});

/**
 * The date of a DT or DTM as ISO 8601 (precision kept), undefined when the whole value is not
 * one (`19700230`, `abc`, `1956-04-02`).
 */
export function hl7DateOf(value: string): string | undefined {
  const m = /^(\d{4})(\d{2})?(\d{2})?(?:(\d{2})(\d{2})?(\d{2})?(?:\.\d{1,4})?)?([+-]\d{4})?$/.exec(
    value,
  );
  if (!m) return undefined;
  const y = Number(m[1]);
  const mo = m[2] ? Number(m[2]) : undefined;
  const d = m[3] ? Number(m[3]) : undefined;
  const timeValid =
    (m[4] === undefined || (m[3] !== undefined && Number(m[4]) <= 23)) &&
    (m[5] === undefined || Number(m[5]) <= 59) &&
    (m[6] === undefined || Number(m[6]) <= 59) &&
    (m[7] === undefined || validOffset(m[7]));
  if (!validDate(y, mo, d) || !timeValid) return undefined;
  return [m[1], m[2], m[3]].filter(Boolean).join('-');
}

/**
 * DTM: YYYY[MM[DD[HH[MM[SS[.S...]]]]]][+/-ZZZZ] → ISO 8601 instant with offset. A German RIS
 * writing MSH-7 `…+0100` and its start times without offset had them read as UTC: an exam
 * at 13:00 local became 14:00 (OBR-7 of our ORU, the report's effectiveDateTime).
 */
export const dtmInstant: TransformFn = ofValue((value, source, input) => {
  const m = /^(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?(?:\.(\d{1,4}))?([+-]\d{4})?$/.exec(
    value,
  );
  const y = m ? Number(m[1]) : NaN;
  const mo = m?.[2] ? Number(m[2]) : 1;
  const d = m?.[3] ? Number(m[3]) : 1;
  const hh = m?.[4] ? Number(m[4]) : 0;
  const mi = m?.[5] ? Number(m[5]) : 0;
  const ss = m?.[6] ? Number(m[6]) : 0;
  if (
    !m ||
    !validDate(y, mo, d) ||
    hh > 23 ||
    mi > 59 ||
    ss > 59 ||
    (m[8] !== undefined && !validOffset(m[8]))
  ) {
    input.quirks.add('invalid-date', `${source} is not an HL7 timestamp`);
    return notMapped(source, 102, `${source} not a valid DTM`);
  }
  if (m[4] === undefined) {
    // A DTM of day (or month, year) precision names no time: kept as the date it is (FHIR
    // dateTime and HL7 DTM take it; a date carries no offset). It was made midnight in the
    // sender's zone, a time nobody gave, and our ORU's OBR-7 and the report's
    // effectiveDateTime said the exam was at 00:00.
    const date = [m[1], m[2], m[3]].filter(Boolean).join('-');
    return storedAs(source, value, date, 'HL7 DTM of date precision, kept as a date');
  }
  const p = (n: number): string => String(n).padStart(2, '0');
  const frac = m[7] ? `.${m[7].slice(0, 3).padEnd(3, '0')}` : '';
  // Without its own offset a DTM is the sender's local time (v2.5.1 chapter 2A, DTM): the zone MSH-7 names,
  // else the site's configured one (a sender that writes no offset anywhere).
  // A configured zone comes first: MSH-7's offset is that of the message's moment, and an exam
  // on the other side of a summer-time change was an hour off.
  const header = input.message.headerUtcOffset;
  const zone = input.config.senderTimeZone;
  const zoned = !m[8] && zone ? offsetInZone(zone, y, mo, d, hh, mi, ss) : undefined;
  const offset = m[8]
    ? `${m[8].slice(0, 3)}:${m[8].slice(3)}`
    : (zoned ?? header ?? input.config.senderUtcOffset);
  const iso = `${m[1]}-${p(mo)}-${p(d)}T${p(hh)}:${p(mi)}:${p(ss)}${frac}${offset}`;
  const via = m[8]
    ? 'HL7 DTM'
    : zoned
      ? `HL7 DTM, sender time zone ${zone} (${zoned})`
      : header
        ? `HL7 DTM, sender offset ${header} (MSH-7)`
        : `HL7 DTM, sender offset ${input.config.senderUtcOffset}`;
  return storedAs(source, value, iso, via);
});
