import type { StudyAttributes } from './study-acquirer.port';

/**
 * What a stored instance is matched, checked and packaged by, read from its Part 10 header:
 * the Patient, General Study, General Series and SOP Common module attributes (PS3.3
 * C.7.1.1, C.7.2.1, C.7.3.1, C.12.1) and the transfer syntax of the File Meta Information
 * (PS3.10 7.1).
 */
export interface InstanceHeader extends Omit<StudyAttributes, 'modalities'> {
  sopClassUid: string;
  sopInstanceUid: string;
  seriesInstanceUid: string;
  transferSyntaxUid: string;
  modality?: string;
}
