import type { QcReportType } from '../imaging-spec/imaging-spec';
import { productsOf } from './metadata-rules';
import type { SandboxDocument } from './report-documents';
import {
  metadataOf,
  studyUidOf,
  type QcRoundRecord,
  type SandboxBatch,
  type SandboxOrder,
} from './sandbox-state';
import { impressionFor, volumetryFor } from './volumetry-findings';

const DISCLAIMER =
  'SANDBOX - synthetic findings for integration testing only; not for clinical use.';

function str(v: unknown): string | null {
  return typeof v === 'string' ? v : null;
}

function patientBlock(order: SandboxOrder): Record<string, string | null> {
  const m = metadataOf(order);
  return {
    patient_id: str(m.patient_id),
    patient_name: str(m.patient_name),
    patient_birth_date: str(m.patient_birth_date),
    patient_sex: str(m.patient_sex),
    accession_number: str(m.accession_number),
  };
}

export function resultsDocument(order: SandboxOrder, iso: (ms: number) => string): SandboxDocument {
  const findings = volumetryFor(order.orderId);
  const bypassed = order.qcRounds.some((r) => r.verdict === 'bypassed');
  const delivered = [...order.history].reverse().find((h) => h.status === 'DELIVERED');
  const impression = impressionFor(findings);
  const caveat = bypassed
    ? 'QC failure was bypassed on user request: interpret with caution.'
    : null;
  const p = patientBlock(order);
  const lines = [
    DISCLAIMER,
    '',
    `Order ID: ${order.orderId}`,
    `Study Instance UID: ${studyUidOf(order) ?? '-'}`,
    `Patient ID: ${p.patient_id ?? '-'}   Accession: ${p.accession_number ?? '-'}`,
    `Products: ${productsOf(metadataOf(order)).join(', ')}`,
    `Reported: ${delivered ? iso(delivered.at) : '-'}`,
    '',
    'Brain MRI volumetry (volume in mL, % of intracranial volume, normative percentile)',
    ...findings.map(
      (f) =>
        `  ${f.structure.padEnd(28)} ${f.volumeMl.toFixed(2).padStart(8)} mL  ${f.icvPercent.toFixed(2).padStart(6)} %ICV  P${String(f.percentile).padStart(2)}${f.flag === 'normal' ? '' : `  (${f.flag})`}`,
    ),
    '',
    `Impression: ${impression}`,
    ...(caveat ? [`Caveat: ${caveat}`] : []),
  ];
  return {
    title: 'Brain MRI Volumetry Report (sandbox)',
    xmlRoot: 'volumetryReport',
    data: {
      report_kind: 'results',
      order_id: order.orderId,
      study_uid: studyUidOf(order),
      ...p,
      products: productsOf(metadataOf(order)),
      reported_at: delivered ? iso(delivered.at) : null,
      qc_bypassed: bypassed,
      findings: findings.map((f) => ({
        structure: f.structure,
        volume_ml: f.volumeMl,
        icv_percent: f.icvPercent,
        percentile: f.percentile,
        flag: f.flag,
      })),
      impression,
      caveat,
      disclaimer: DISCLAIMER,
    },
    lines,
    chart: findings.map((f) => ({ label: f.structure, percentile: f.percentile, flag: f.flag })),
    table: [
      ['structure', 'volume_ml', 'icv_percent', 'percentile', 'flag'],
      ...findings.map((f) => [
        f.structure,
        f.volumeMl.toFixed(2),
        f.icvPercent.toFixed(2),
        String(f.percentile),
        f.flag,
      ]),
    ],
  };
}

export function failureDocument(order: SandboxOrder, iso: (ms: number) => string): SandboxDocument {
  const failure = order.failure!;
  const at =
    [...order.history].reverse().find((h) => h.status === failure.step)?.at ?? order.updatedAt;
  const agent = order.agentFailure;
  const data = {
    report_kind: 'failure',
    order_id: order.orderId,
    study_uid: studyUidOf(order),
    status: order.status,
    failed_step: failure.step,
    reason: failure.reason,
    failed_at: iso(at),
    institution_name: str(metadataOf(order).institution_name),
    agent_report: agent,
    disclaimer: DISCLAIMER,
  };
  return {
    title: 'Processing Failure Report (sandbox)',
    xmlRoot: 'failureReport',
    data,
    lines: [
      DISCLAIMER,
      '',
      `Order ID: ${order.orderId}`,
      `Study Instance UID: ${data.study_uid ?? '-'}`,
      `Status: ${order.status}`,
      `Failed at: ${data.failed_at}`,
      `Institution: ${data.institution_name ?? '-'}`,
      `Reason: ${failure.reason}`,
    ],
    chart: [],
    table: [
      ['order_id', 'study_uid', 'status', 'failed_step', 'failed_at', 'reason', 'institution_name'],
      [
        order.orderId,
        data.study_uid ?? '',
        order.status,
        failure.step,
        data.failed_at,
        failure.reason,
        data.institution_name ?? '',
      ],
    ],
  };
}

export function qcReportBody(
  order: SandboxOrder,
  round: QcRoundRecord,
  type: QcReportType,
  iso: (ms: number) => string,
): Record<string, unknown> {
  const base = {
    order_id: order.orderId,
    study_uid: studyUidOf(order),
    round: round.round,
    created_at: iso(round.createdAt),
  };
  if (type === 'results') {
    if (round.agentContent) return { ...base, source: 'agent', ...round.agentContent };
    return { ...base, verdict: round.verdict, checks: round.checks, note: round.note };
  }
  const a = order.upload?.intake.acquisition;
  return {
    ...base,
    acquisition: {
      modality: a?.modality ?? null,
      study_description: a?.studyDescription ?? null,
      series_descriptions: a?.seriesDescriptions ?? [],
      series_count: order.upload?.intake.series ?? 0,
      instance_count: order.upload?.intake.instances ?? 0,
      rows: a?.rows ?? null,
      columns: a?.columns ?? null,
      slice_thickness_mm: a?.sliceThicknessMm ?? null,
      magnetic_field_strength_t: a?.fieldStrengthT ?? null,
      nifti_files: a?.niftiFiles ?? [],
      diffusion_directions: a?.diffusionDirections ?? null,
      upload_kind: order.upload?.intake.kind ?? null,
      upload_bytes: order.upload?.intake.bytes ?? 0,
    },
  };
}

export function batchDocument(
  batch: SandboxBatch,
  orders: SandboxOrder[],
  iso: (ms: number) => string,
): SandboxDocument {
  const entries = orders.map((o) => {
    const findings = o.status === 'DELIVERED' ? volumetryFor(o.orderId) : null;
    return {
      order_id: o.orderId,
      study_uid: studyUidOf(o),
      status: o.status,
      whole_brain_ml: findings?.find((f) => f.structure === 'Whole brain')?.volumeMl ?? null,
      left_hippocampus_ml:
        findings?.find((f) => f.structure === 'Left hippocampus')?.volumeMl ?? null,
      right_hippocampus_ml:
        findings?.find((f) => f.structure === 'Right hippocampus')?.volumeMl ?? null,
      lateral_ventricles_ml:
        findings?.find((f) => f.structure === 'Lateral ventricles')?.volumeMl ?? null,
      impression: findings ? impressionFor(findings) : null,
    };
  });
  const delivered = entries.filter((e) => e.status === 'DELIVERED');
  const mean = (xs: (number | null)[]): number | null => {
    const v = xs.filter((x): x is number => x !== null);
    return v.length === 0
      ? null
      : Math.round((v.reduce((a, b) => a + b, 0) / v.length) * 100) / 100;
  };
  const summary = {
    orders: entries.length,
    delivered: delivered.length,
    mean_whole_brain_ml: mean(delivered.map((e) => e.whole_brain_ml)),
    mean_left_hippocampus_ml: mean(delivered.map((e) => e.left_hippocampus_ml)),
    mean_right_hippocampus_ml: mean(delivered.map((e) => e.right_hippocampus_ml)),
  };
  return {
    title: 'Batch Volumetry Report (sandbox)',
    xmlRoot: 'batchReport',
    data: {
      report_kind: 'batch',
      study_group: batch.batchId,
      products: batch.products,
      created_at: iso(batch.createdAt),
      summary,
      orders: entries,
      disclaimer: DISCLAIMER,
    },
    lines: [
      DISCLAIMER,
      '',
      `Study group: ${batch.batchId}`,
      `Products: ${batch.products.join(', ')}`,
      `Orders: ${summary.orders}, delivered: ${summary.delivered}`,
      `Mean whole brain volume: ${summary.mean_whole_brain_ml ?? '-'} mL`,
      '',
      ...entries.map(
        (e) =>
          `  ${e.order_id}  ${e.status.padEnd(26)} ${e.whole_brain_ml === null ? '' : `WB ${e.whole_brain_ml.toFixed(1)} mL`}`,
      ),
    ],
    chart: delivered.map((e) => ({
      label: e.order_id,
      percentile: Math.min(100, Math.max(0, ((e.whole_brain_ml ?? 0) - 850) / 6)),
      flag: 'normal' as const,
    })),
    table: [
      ['order_id', 'study_uid', 'status', 'whole_brain_ml'],
      ...entries.map((e) => [
        e.order_id,
        e.study_uid ?? '',
        e.status,
        e.whole_brain_ml === null ? '' : String(e.whole_brain_ml),
      ]),
    ],
  };
}
