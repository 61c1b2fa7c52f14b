import { notMapped, ofValue, storedAs, type TransformFn } from './hl7-value.kit';

/** Dates and timestamps (DT, DTM; chapter 2A) → ISO 8601. */

function validDate(y: number, m?: number, d?: number): boolean {
  if (m === undefined) return y >= 1800 && y <= 2999;
  if (m < 1 || m > 12) return false;
  if (d === undefined) return true;
  const days = new Date(Date.UTC(y, m, 0)).getUTCDate();
  return d >= 1 && d <= days;
}

/** DT/DTM → ISO 8601 date or partial date, precision kept. */
export const partialDate: TransformFn = ofValue((value, source, input) => {
  const m = /^(\d{4})(\d{2})?(\d{2})?/.exec(value);
  const y = m ? Number(m[1]) : NaN;
  const mo = m?.[2] ? Number(m[2]) : undefined;
  const d = m?.[3] ? Number(m[3]) : undefined;
  if (!m || !validDate(y, mo, d)) {
    input.quirks.add('invalid-date', `${source} is not an HL7 date`);
    return notMapped(source, 102, `${source} not a valid date`);
  }
  const iso = [m[1], m[2], m[3]].filter(Boolean).join('-');
  return storedAs(source, value, iso, 'HL7 DT');
});

/** DTM: YYYY[MM[DD[HH[MM[SS[.S...]]]]]][+/-ZZZZ] → ISO 8601 instant with offset. */
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
  if (!m || !validDate(y, mo, d) || hh > 23 || mi > 59 || ss > 59) {
    input.quirks.add('invalid-date', `${source} is not an HL7 timestamp`);
    return notMapped(source, 102, `${source} not a valid DTM`);
  }
  const p = (n: number): string => String(n).padStart(2, '0');
  const frac = m[7] ? `.${m[7].slice(0, 3).padEnd(3, '0')}` : '';
  const offset = m[8] ? `${m[8].slice(0, 3)}:${m[8].slice(3)}` : input.config.senderUtcOffset;
  const iso = `${m[1]}-${p(mo)}-${p(d)}T${p(hh)}:${p(mi)}:${p(ss)}${frac}${offset}`;
  const via = m[8] ? 'HL7 DTM' : `HL7 DTM, sender offset ${input.config.senderUtcOffset}`;
  return storedAs(source, value, iso, via);
});
