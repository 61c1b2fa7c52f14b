import { createHash } from 'node:crypto';
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
