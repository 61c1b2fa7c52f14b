import { createHash } from 'node:crypto';
import type { Attachment } from '@medplum/fhirtypes';
import type { PublicationInput } from './publication.model';

/** A PDF too large to travel inside a DiagnosticReport or an ORU: what stands for it. */
export interface PdfReference {
  bytes: number;
  /** SHA-1 of the PDF, Base64 (FHIR Attachment.hash). */
  sha1: string;
  /** The WADO-RS URL of its encapsulated PDF instance in the PACS, when the PACS gets it. */
  url?: string;
}

/** The PDF to embed, or undefined when there is none or it is above the embed limit. */
export function embeddedPdf(input: PublicationInput): Buffer | undefined {
  const pdf = input.pdf;
  if (!pdf) return undefined;
  return input.pdfEmbed && pdf.length > input.pdfEmbed.maxBytes ? undefined : pdf;
}

/** The reference for a PDF above the embed limit, else undefined. */
export function pdfReference(input: PublicationInput): PdfReference | undefined {
  const pdf = input.pdf;
  if (!pdf || embeddedPdf(input)) return undefined;
  return {
    bytes: pdf.length,
    sha1: createHash('sha1').update(pdf).digest('base64'),
    ...(input.pdfEmbed?.pacsUrl ? { url: input.pdfEmbed.pacsUrl } : {}),
  };
}

/**
 * The QC report as the DiagnosticReport carries it: its JSON inside, or, above the embed limit,
 * its size and SHA-1 only. Embedded whatever its size, 22 MB of per-slice checks made a 30 MB
 * DiagnosticReport that the EHR refused (400): the final QC rejection never reached it.
 */
export function qcReportForm(input: PublicationInput): Attachment | undefined {
  if (input.qcReport === undefined) return undefined;
  const json = Buffer.from(JSON.stringify(input.qcReport));
  const title = 'Quality control report';
  if (!input.pdfEmbed || json.length <= input.pdfEmbed.maxBytes)
    return { contentType: 'application/json', data: json.toString('base64'), title };
  return {
    contentType: 'application/json',
    size: json.length,
    hash: createHash('sha1').update(json).digest('base64'),
    title: `${title} (${json.length} bytes, not embedded)`,
  };
}
