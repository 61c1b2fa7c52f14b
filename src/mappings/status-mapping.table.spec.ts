import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UPSTREAM_STATUSES } from '../imaging-spec/imaging-spec';
import {
  STATUS_TABLE,
  statusRow,
  type OutboundRowKey,
  type StatusRow,
} from './status-mapping.table';

const GOLDEN = join(__dirname, '..', '..', 'test', 'fixtures', 'status-mapping.golden.json');

describe('status mapping table (DESIGN.md section 4)', () => {
  it('has one row per upstream status, QC_FAILED split into bypassable and final, and the two local ends', () => {
    const keys = Object.keys(STATUS_TABLE).sort();
    const expected = [
      ...UPSTREAM_STATUSES.filter((s) => s !== 'QC_FAILED'),
      'QC_FAILED_BYPASSABLE',
      'QC_FAILED_FINAL',
      'ENDED_LOCALLY_FAILED',
      'ENDED_LOCALLY_CANCELLED',
    ].sort();
    expect(keys).toEqual(expected);
  });

  it('never presents a QC rejection or a failure as a finding', () => {
    const noResult: OutboundRowKey[] = [
      'QC_FAILED_FINAL',
      'FAILED',
      'PREPROCESSING_FAILED',
      'CANCELLED',
      'EXPIRED',
      'ENDED_LOCALLY_FAILED',
      'ENDED_LOCALLY_CANCELLED',
    ];
    for (const key of noResult) {
      const row: StatusRow = STATUS_TABLE[key];
      expect({
        key,
        report: row.report,
        obr25: row.hl7.resultStatus,
        obx11: row.hl7.observationStatus,
        orc5: row.hl7.orderStatus,
      }).toEqual({
        key,
        report: 'cancelled',
        obr25: 'X',
        obx11: 'X',
        orc5: 'CA',
      });
      expect(row.publish).not.toContain('dicom-sr');
      expect(row.publish).not.toContain('dicom-pdf');
    }
    // only DELIVERED carries results
    const withResults = Object.entries(STATUS_TABLE)
      .filter(([, r]) => 'report' in r && r.report === 'final')
      .map(([k]) => k);
    expect(withResults).toEqual(['DELIVERED']);
  });

  it('holds a bypassable QC rejection on-hold, and fails a final one', () => {
    expect(statusRow('QC_FAILED', { qcBypassPossible: true })).toMatchObject({
      key: 'QC_FAILED_BYPASSABLE',
      orderState: 'qc-hold',
      task: { status: 'on-hold' },
      hl7: { orderStatus: 'HD' },
    });
    expect(statusRow('QC_FAILED', { qcBypassPossible: false })).toMatchObject({
      key: 'QC_FAILED_FINAL',
      orderState: 'failed',
      task: { status: 'failed' },
      report: 'cancelled',
      attach: 'qc-report',
    });
  });

  it('answers CR for a cancel the orderer asked for, OC otherwise', () => {
    expect(statusRow('CANCELLED', { cancelRequestedByOrderer: true }).hl7.orderControl).toBe('CR');
    expect(statusRow('CANCELLED', {}).hl7.orderControl).toBe('OC');
  });

  it('applies per-site overrides to one row only', () => {
    const row = statusRow('QUEUED', {}, { QUEUED: { publish: ['fhir-task'] } });
    expect(row.publish).toEqual(['fhir-task']);
    expect(statusRow('PENDING', {}, { QUEUED: { publish: ['fhir-task'] } }).publish).toContain(
      'hl7-orm-status',
    );
  });

  it('matches the reviewed golden table row by row', () => {
    const actual = JSON.parse(JSON.stringify(STATUS_TABLE));
    if (process.env.UPDATE_GOLDEN) writeFileSync(GOLDEN, `${JSON.stringify(actual, null, 2)}\n`);
    const golden = JSON.parse(readFileSync(GOLDEN, 'utf8'));
    for (const key of Object.keys(golden))
      expect({ key, row: actual[key] }).toEqual({ key, row: golden[key] });
    expect(Object.keys(actual).sort()).toEqual(Object.keys(golden).sort());
  });
});
