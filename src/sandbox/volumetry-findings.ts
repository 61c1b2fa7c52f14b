import { createHash } from 'node:crypto';

/**
 * Synthetic, deterministic brain-MRI volumetry for one order: the same order id always gives
 * the same numbers. The volumes are drawn so that they hang together (whole brain is a share
 * of intracranial volume, grey + white matter make up the whole brain); means and standard
 * deviations are round, plausible adult values, not a normative database, and the reports
 * say so.
 */
export interface VolumetryFinding {
  structure: string;
  volumeMl: number;
  /** Volume as a share of total intracranial volume, in percent. */
  icvPercent: number;
  /** Percentile against the synthetic reference (mean, sd below). */
  percentile: number;
  /** Outside the 5th–95th percentile band. */
  flag: 'normal' | 'low' | 'high';
}

const REFERENCE = {
  icv: { structure: 'Total intracranial volume', mean: 1450, sd: 120 },
  wholeBrain: { structure: 'Whole brain', mean: 1160, sd: 110 },
  grey: { structure: 'Grey matter', mean: 650, sd: 65 },
  white: { structure: 'White matter', mean: 510, sd: 55 },
  leftHippocampus: { structure: 'Left hippocampus', mean: 3.6, sd: 0.4 },
  rightHippocampus: { structure: 'Right hippocampus', mean: 3.7, sd: 0.4 },
  ventricles: { structure: 'Lateral ventricles', mean: 24, sd: 9 },
} as const;

/** Standard normal CDF (Abramowitz–Stegun 7.1.26 approximation of erf). */
function normalCdf(z: number): number {
  const t = 1 / (1 + (0.3275911 * Math.abs(z)) / Math.SQRT2);
  const y =
    1 -
    ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) *
      t *
      Math.exp((-z * z) / 2);
  return z >= 0 ? (1 + y) / 2 : (1 - y) / 2;
}

const round2 = (x: number): number => Math.round(x * 100) / 100;

export function volumetryFor(orderId: string): VolumetryFinding[] {
  const digest = createHash('sha256').update(`volumetry:${orderId}`).digest();
  // Six draws, each z in about [-2.6, 2.6].
  const z = (i: number): number => (digest.readUInt16BE(i * 2) / 65535 - 0.5) * 5.2;
  const icv = REFERENCE.icv.mean + z(0) * REFERENCE.icv.sd;
  const wholeBrain = icv * (0.8 + z(1) * 0.03);
  const grey = wholeBrain * (0.56 + z(2) * 0.015);
  const white = wholeBrain - grey;
  const left = REFERENCE.leftHippocampus.mean + z(3) * REFERENCE.leftHippocampus.sd;
  const right = left + 0.1 + z(4) * 0.12;
  const ventricles = Math.max(6, REFERENCE.ventricles.mean + z(5) * REFERENCE.ventricles.sd);
  const values: [keyof typeof REFERENCE, number][] = [
    ['icv', icv],
    ['wholeBrain', wholeBrain],
    ['grey', grey],
    ['white', white],
    ['leftHippocampus', left],
    ['rightHippocampus', right],
    ['ventricles', ventricles],
  ];
  return values.map(([key, v]) => {
    const ref = REFERENCE[key];
    const percentile = Math.min(
      99,
      Math.max(1, Math.round(normalCdf((v - ref.mean) / ref.sd) * 100)),
    );
    return {
      structure: ref.structure,
      volumeMl: round2(v),
      icvPercent: round2((v / icv) * 100),
      percentile,
      flag: percentile < 5 ? 'low' : percentile > 95 ? 'high' : 'normal',
    };
  });
}

export function ordinal(n: number): string {
  const tens = n % 100;
  if (tens >= 11 && tens <= 13) return `${n}th`;
  return `${n}${['th', 'st', 'nd', 'rd'][n % 10] ?? 'th'}`;
}

export function impressionFor(findings: VolumetryFinding[]): string {
  const abnormal = findings.filter((f) => f.flag !== 'normal');
  if (abnormal.length === 0)
    return 'All measured volumes lie within the 5th-95th percentile of the synthetic reference.';
  return `Outside the 5th-95th percentile: ${abnormal.map((f) => `${f.structure} (${ordinal(f.percentile)} percentile)`).join(', ')}.`;
}
