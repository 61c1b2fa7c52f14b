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
  /** Percentile against the synthetic reference; brain structures ICV-adjusted. */
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
  // Standard normal draws (Box–Muller on hash bytes), clamped to ±2.8.
  const z = (i: number): number => {
    const u1 = (digest.readUInt16BE(i * 4) + 1) / 65537;
    const u2 = digest.readUInt16BE(i * 4 + 2) / 65536;
    const n = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
    return Math.max(-2.8, Math.min(2.8, n));
  };
  const zs = [z(0), z(1), z(2), z(3), z(4), z(5)];
  const icv = REFERENCE.icv.mean + zs[0] * REFERENCE.icv.sd;
  // Brain structures scale with head size; their percentiles are ICV-adjusted, i.e. they
  // follow each structure's own deviation from what this intracranial volume predicts.
  const headScale = icv / REFERENCE.icv.mean;
  const wholeBrain = icv * (0.8 + zs[1] * 0.025);
  const grey = wholeBrain * (0.56 + zs[2] * 0.015);
  const white = wholeBrain - grey;
  const left = headScale * (REFERENCE.leftHippocampus.mean + zs[3] * REFERENCE.leftHippocampus.sd);
  const right =
    headScale *
    (REFERENCE.rightHippocampus.mean + (zs[3] * 0.8 + zs[4] * 0.6) * REFERENCE.rightHippocampus.sd);
  const ventricles = Math.max(
    6,
    headScale * (REFERENCE.ventricles.mean + zs[5] * REFERENCE.ventricles.sd),
  );
  const greyZ = (zs[1] + zs[2]) / Math.SQRT2;
  const whiteZ = (zs[1] - zs[2]) / Math.SQRT2;
  const values: [keyof typeof REFERENCE, number, number][] = [
    ['icv', icv, zs[0]],
    ['wholeBrain', wholeBrain, zs[1]],
    ['grey', grey, greyZ],
    ['white', white, whiteZ],
    ['leftHippocampus', left, zs[3]],
    ['rightHippocampus', right, zs[3] * 0.8 + zs[4] * 0.6],
    ['ventricles', ventricles, zs[5]],
  ];
  return values.map(([key, v, zValue]) => {
    const percentile = Math.min(99, Math.max(1, Math.round(normalCdf(zValue) * 100)));
    return {
      structure: REFERENCE[key].structure,
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
