import { parseJsonAllowingNonFinite } from '../common/json-non-finite';
import { parseHl7, type Hl7Message } from '../hl7/hl7-message';
import type { PublicationInput } from '../mappings/publication.model';
import { dicomUidsFor } from '../mappings/publication.model';
import { boundedText, MAX_TEXT, parseResultContent } from '../mappings/result-content.mapping';
import type { AcquiredStudy } from '../domain/study-acquirer.port';
import type { PublicationRepository } from '../persistence/publication.repository';
import type { SourceStudy } from './dicom-result.builder';
import { OutboundError } from './outbound.error';
import type { OutboxPayload } from './outbox-order-events';
import { deviceFor, DESTINATIONS, type OutboundSettings } from './outbound.settings';

export interface LoadedPublication {
  input: PublicationInput;
  /** The original HL7 order (PID / PV1 / MSH come from it), when the order came over MLLP. */
  original?: Hl7Message;
  /** The source study's attributes and instances, when the study was acquired. */
  source?: SourceStudy;
  /** Our own ServiceRequest (POSTed to the front door, no EHR holds it). */
  ownServiceRequestId?: string;
}

/** Reads what a publication needs from the order, its documents, its original message and study. */
export async function loadPublication(
  publications: PublicationRepository,
  settings: OutboundSettings,
  payload: OutboxPayload,
): Promise<LoadedPublication> {
  const order = await publications.findOrder<AcquiredStudy>(payload.orderId);
  if (!order) throw new OutboundError('order_missing', 'the order no longer exists');
  const docs =
    payload.documentIds.length > 0
      ? await publications.findDocuments(payload.documentIds, payload.orderId)
      : [];
  const input: PublicationInput = {
    orderId: order.id,
    row: payload.row,
    upstreamStatus: payload.upstreamStatus,
    statusAt: payload.statusAt,
    correction: payload.revision > 0,
    revision: payload.revision,
    ...(payload.reason ? { reason: payload.reason } : {}),
    qcBypass: payload.qcBypass
      ? { by: payload.qcBypass.by, reason: payload.qcBypass.reason }
      : null,
    order: {
      source: order.source,
      request: order.request,
      accessionNumber: order.accession_number,
      placerOrderNumber: order.placer_order_number,
      fillerOrderNumber: order.filler_order_number,
      studyInstanceUid: order.study_instance_uid ?? order.study?.studyInstanceUid ?? null,
      createdAt: new Date(order.created_at).toISOString(),
    },
    device: deviceFor(settings, order.request.products),
  };
  for (const d of docs) {
    if (d.kind === 'results' && d.report_type === 'JSON') {
      try {
        input.results = parseResultContent(d.body);
      } catch {
        // The parser's message may quote the report: keep it out of the audit summary.
        throw new OutboundError('bad_document', 'the results report is not a readable JSON object');
      }
    } else if (d.report_type === 'PDF') {
      input.pdf = d.body;
    } else if (d.kind === 'qc') {
      input.qcReport = safeJson(d.body);
    } else if (d.kind === 'failure' && d.report_type === 'JSON') {
      const failure = safeJson(d.body) as { reason?: unknown } | undefined;
      if (!input.reason && typeof failure?.reason === 'string' && failure.reason.trim()) {
        input.reason = boundedText(failure.reason.trim(), MAX_TEXT.reason);
      }
    }
  }
  const loaded: LoadedPublication = { input };
  if (order.study?.attributes && order.study.instances?.length) {
    loaded.source = { attributes: order.study.attributes, instances: order.study.instances };
  }
  const studyUid = input.order.studyInstanceUid;
  if (studyUid) input.dicom = dicomUidsFor(order.id, payload.revision, studyUid);
  if (input.pdf || input.qcReport !== undefined) {
    const d = input.dicom;
    const pacs =
      input.pdf && settings.pacsBaseUrl && d && settings.destinations.includes(DESTINATIONS.dicom)
        ? `${settings.pacsBaseUrl}/studies/${d.studyInstanceUid}/series/${d.pdfSeriesUid}/instances/${d.pdfInstanceUid}`
        : undefined;
    input.pdfEmbed = { maxBytes: settings.pdfEmbedMaxBytes, ...(pacs ? { pacsUrl: pacs } : {}) };
  }
  if (order.raw && order.transport === 'mllp') {
    try {
      loaded.original = parseHl7(order.raw);
    } catch {
      // An order we accepted parses; if not, PID/PV1 are built from the order instead.
    }
  }
  if (order.source === 'fhir') {
    const sr = await publications.findServiceRequest(order.id);
    if (sr?.source_url) {
      input.serviceRequest = sr.source_url.replace(/\/_history\/.*$/, '');
      input.patientReference = sr.resource.subject?.reference ?? null;
    } else if (sr) {
      loaded.ownServiceRequestId = sr.id;
    }
  }
  return loaded;
}

function safeJson(body: Buffer): unknown {
  try {
    return parseJsonAllowingNonFinite(body.toString('utf8'));
  } catch {
    return { text: body.toString('utf8').slice(0, 10_000) };
  }
}
