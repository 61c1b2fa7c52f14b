/**
 * Storage SOP Classes that are not images (PS3.4 Annex B.5, Table B.5-1), by UID prefix: a
 * study pushed from a PACS carries them next to its images (presentation states, key object
 * selections, earlier SRs, encapsulated PDFs, waveforms). The SR's Image Library (TID 1600)
 * lists IMAGE content items, so these stay out of it; they are still named in the evidence
 * (Current Requested Procedure Evidence Sequence), which lists every instance.
 */
const NON_IMAGE_PREFIXES: readonly string[] = [
  '1.2.840.10008.5.1.4.1.1.9.', // waveforms (ECG, audio, hemodynamic …)
  '1.2.840.10008.5.1.4.1.1.11.', // softcopy presentation states
  '1.2.840.10008.5.1.4.1.1.66', // raw data, spatial registration, fiducials, segmentation …
  '1.2.840.10008.5.1.4.1.1.67', // real world value mapping
  '1.2.840.10008.5.1.4.1.1.88.', // structured reports and Key Object Selection
  '1.2.840.10008.5.1.4.1.1.104.', // encapsulated documents (PDF, CDA, STL …)
  '1.2.840.10008.5.1.4.1.1.481.2', // RT dose, structure set, plans, records (not RT Image, .481.1)
  '1.2.840.10008.5.1.4.1.1.481.3',
  '1.2.840.10008.5.1.4.1.1.481.4',
  '1.2.840.10008.5.1.4.1.1.481.5',
  '1.2.840.10008.5.1.4.1.1.481.6',
  '1.2.840.10008.5.1.4.1.1.481.7',
  '1.2.840.10008.5.1.4.1.1.481.8',
  '1.2.840.10008.5.1.4.1.1.481.9',
];

/** Whether instances of this SOP Class are images, as far as the table above knows. */
export function isImageSopClass(sopClassUid: string): boolean {
  return !NON_IMAGE_PREFIXES.some((prefix) => sopClassUid.startsWith(prefix));
}
