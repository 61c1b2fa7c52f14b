import { partialDate, dtmInstant } from './hl7-value.dates';
import {
  coded,
  codedList,
  dg1Diagnoses,
  modality,
  orderControl,
  priority0027,
  sex0001,
} from './hl7-value.codes';
import { accession, accessionIssuer, cxList, ei, uid } from './hl7-value.identifiers';
import type { TransformFn } from './hl7-value.kit';
import { prtOrderingProvider, xcn, xpn } from './hl7-value.names';
import { productTable } from './hl7-value.products';
import { freeTextReason, nteNotes, stringTransform } from './hl7-value.text';

/**
 * Pure value transforms named in the mapping table (hl7-order.mapping.ts); each reads one
 * source position. What they take and give is in hl7-value.kit.ts; they live by data type:
 * names, dates, identifiers, codes, text, products.
 */
export type Hl7TransformId =
  | 'string'
  | 'cx-list'
  | 'xpn'
  | 'partial-date'
  | 'sex-0001'
  | 'order-control'
  | 'ei'
  | 'coded'
  | 'coded-list'
  | 'free-text-reason'
  | 'dg1-diagnoses'
  | 'modality'
  | 'uid'
  | 'priority-0027'
  | 'xcn'
  | 'prt-ordering-provider'
  | 'dtm-instant'
  | 'nte-notes'
  | 'product-table'
  | 'accession'
  | 'accession-issuer';

export const HL7_TRANSFORMS: Readonly<Record<Hl7TransformId, TransformFn>> = {
  string: stringTransform,
  'cx-list': cxList,
  xpn,
  'partial-date': partialDate,
  'sex-0001': sex0001,
  'order-control': orderControl,
  ei,
  coded,
  'coded-list': codedList,
  'free-text-reason': freeTextReason,
  'dg1-diagnoses': dg1Diagnoses,
  modality,
  uid,
  'priority-0027': priority0027,
  xcn,
  'prt-ordering-provider': prtOrderingProvider,
  'dtm-instant': dtmInstant,
  'nte-notes': nteNotes,
  'product-table': productTable,
  accession,
  'accession-issuer': accessionIssuer,
};
